"""CAD formats other than DXF are identified with their basic facts; KMZ is read as geo."""

from __future__ import annotations

import io
import struct
import zipfile

import pytest

from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings, form

STEP = b"""ISO-10303-21;
HEADER;
FILE_DESCRIPTION(('part'),'2;1');
FILE_NAME('bracket.stp','2026-11-21T10:00:00',('ada'),('conclave'),'pp','CadTool 9','');
FILE_SCHEMA(('AUTOMOTIVE_DESIGN { 1 0 10303 214 1 1 1 1 }'));
ENDSEC;
DATA;
#1=CARTESIAN_POINT('',(0.,0.,0.));
#2=CARTESIAN_POINT('',(1.,0.,0.));
#3=DIRECTION('',(0.,0.,1.));
ENDSEC;
END-ISO-10303-21;
"""
IFC = STEP.replace(b"AUTOMOTIVE_DESIGN { 1 0 10303 214 1 1 1 1 }", b"IFC4").replace(
    b"bracket.stp", b"house.ifc"
)


def _dwg() -> bytes:
    # A DWG starts with its release code; the rest is opaque to us (identification only).
    return b"AC1032" + b"\x00" * 250 + struct.pack("<I", 1234) * 64


def _stl_ascii() -> bytes:
    facet = (
        b"facet normal 0 0 1\n outer loop\n  vertex 0 0 0\n  vertex 1 0 0\n  vertex 0 1 0\n"
        b" endloop\nendfacet\n"
    )
    return b"solid part\n" + facet * 3 + b"endsolid part\n"


def _kmz() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("doc.kml", samples.kml())
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("media_type", "name", "content", "expected"),
    [
        ("cad", "bracket.stp", STEP,
         {"format": "step", "schema": "AUTOMOTIVE_DESIGN { 1 0 10303 214 1 1 1 1 }",
          "originating_system": "CadTool 9", "entity_instances": 3}),
        ("cad", "house.ifc", IFC, {"format": "ifc", "schema": "IFC4", "entity_instances": 3}),
        ("cad", "plan.dwg", _dwg(), {"format": "dwg", "version": "AC1032", "release": "R2018"}),
        ("cad", "part.stl", _stl_ascii(), {"format": "stl", "encoding": "ascii", "triangles": 3}),
        ("cad", "part-bin.stl", samples.stl_binary(triangles=2),
         {"format": "stl", "encoding": "binary", "triangles": 2}),
    ],
    ids=["step", "ifc", "dwg", "stl-ascii", "stl-binary"],
)  # fmt: skip
async def test_cad_formats_are_identified(
    backend: Backend, tmp_path, media_type, name, content, expected
):
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        response = await client.post(f"/api/edge-intake/{media_type}", **form((name, content)))
        assert response.status_code == 200, response.text
        [evidence_id] = response.json()["evidence_ids"]
        pack = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()
        for key, value in expected.items():
            assert pack["extracted"][key] == value, (key, pack["extracted"])


async def test_kmz_is_read_as_geo(backend: Backend, tmp_path):
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        response = await client.post("/api/edge-intake/geo", **form(("route.kmz", _kmz())))
        assert response.status_code == 200, response.text
        [evidence_id] = response.json()["evidence_ids"]
        extracted = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()[
            "extracted"
        ]
        plain = await client.post("/api/edge-intake/geo", **form(("route.kml", samples.kml())))
        [kml_id] = plain.json()["evidence_ids"]
        kml = (await client.get(f"/api/edge-intake/evidence/{kml_id}")).json()["extracted"]
        assert extracted["feature_count"] == kml["feature_count"] > 0
        assert extracted["bbox"] == kml["bbox"]
