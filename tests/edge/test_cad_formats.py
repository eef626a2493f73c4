"""CAD formats other than DXF are identified with their basic facts; KMZ is read as geo."""

from __future__ import annotations

import io
import struct
import zipfile

import ezdxf
import pytest

from conclave.edge.agents import step
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


# A STEP data section where only four statements are instances: strings and comments hold
# "#9=" and ";", a doubled quote escapes one, and an entity continues on a line starting "#".
STEP_TRICKY = b"""ISO-10303-21;
HEADER;
/* written by a converter; FILE_NAME('not', 'this') */
FILE_DESCRIPTION(('a (part); with #1= inside'),'2;1');
FILE_NAME(/* name */ 'it''s (v2).stp', /* time_stamp */ '2026-11-21T10:00:00',
  ('ada (lead)', 'bob'), ('conclave'), 'pp 1.0',
  /* originating_system */ 'Tool (R2) ''beta''', '');
FILE_SCHEMA(('CONFIG_CONTROL_DESIGN'));
ENDSEC;
DATA;
#1=PRODUCT('p;#2=x','it''s;#3=',' ',(#4)) ;
#10 = ADVANCED_FACE('',(#11,
#12),#13,.T.);
/* #99=COMMENTED_OUT(); */ #20=SHAPE('/* not a comment */');
#30=CARTESIAN_POINT('',(0.,0.,0.));
ENDSEC;
END-ISO-10303-21;
"""


def test_step_instances_are_counted_the_same_wherever_the_file_is_cut():
    whole = step.InstanceCounter()
    whole.feed(STEP_TRICKY)
    assert whole.count == 4
    for size in range(1, 12):
        counter = step.InstanceCounter()
        for start in range(0, len(STEP_TRICKY), size):
            counter.feed(STEP_TRICKY[start : start + size])
        assert counter.count == 4, size


async def test_step_header_comments_and_quoted_parentheses_keep_the_originating_system(
    sqlite_engine, memory_bus, tmp_path
):
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        extracted = await _extracted(client, "cad", ("part.stp", STEP_TRICKY))
    assert extracted["originating_system"] == "Tool (R2) 'beta'"
    assert extracted["schema"] == "CONFIG_CONTROL_DESIGN"
    assert extracted["entity_instances"] == 4


async def test_stl_encoding_follows_the_size_not_the_header_text(
    sqlite_engine, memory_bus, tmp_path
):
    # Binary STLs often carry "solid <name>" (even "facet") in their 80-byte header; ASCII
    # exporters may write a whole model on one line.
    header = b"solid part exported with facet normals".ljust(80, b" ")
    binary = header + struct.pack("<I", 3) + b"\x00" * 50 * 3
    one_line = b"solid x " + b"facet normal 0 0 1 outer loop vertex 0 0 0 endloop endfacet " * 5000
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        read_binary = await _extracted(client, "cad", ("part.stl", binary))
        read_ascii = await _extracted(client, "cad", ("line.stl", one_line + b"endsolid x"))
    assert (read_binary["encoding"], read_binary["triangles"]) == ("binary", 3)
    assert (read_ascii["encoding"], read_ascii["triangles"]) == ("ascii", 5000)


async def test_ascii_stl_is_text_with_closed_facets(sqlite_engine, memory_bus, tmp_path):
    # "solid" and "facet" in the head make an STL candidate; the rest must be an STL too, not a
    # ZIP (or any binary) riding behind it, nor facets left open.
    polyglot = b"solid x\nfacet\n" + b"PK\x03\x04\x14\x00" + b"\x00" * 64 + b"evil.exe"
    unclosed = b"solid x\nfacet normal 0 0 1\n outer loop\n" + b"vertex 0 0 0\n" * 3
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        for name, content in [("zip.stl", polyglot), ("open.stl", unclosed)]:
            response = await client.post("/api/edge-intake/cad", **form((name, content)))
            assert response.status_code == 422, (name, response.text)
            assert response.json()["code"] == "CORRUPT_MEDIA"
        extracted = await _extracted(client, "cad", ("part.stl", _stl_ascii()))
    assert extracted["triangles"] == 3


async def test_dxf_facts_list_a_bounded_number_of_layers_and_count_them_all(
    sqlite_engine, memory_bus, tmp_path
):
    doc = ezdxf.new("R12")
    for index in range(300):
        doc.layers.add(f"L{index:03}" + "x" * 400)
    stream = io.StringIO()
    doc.write(stream)
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        extracted = await _extracted(client, "cad", ("layers.dxf", stream.getvalue().encode()))
    assert extracted["layer_count"] == 302  # with "0" and "Defpoints"
    assert len(extracted["layers"]) == 100
    assert "L000" + "x" * 251 in extracted["layers"]


def _nested_blocks(levels: int, *, cyclic: bool = False) -> bytes:
    # Ten references per block, `levels` deep: 10**levels lines from a few kilobytes.
    doc = ezdxf.new("R2000")
    inner = None
    for level in range(levels):
        block = doc.blocks.new(f"B{level}")
        if inner is None:
            block.add_line((0, 0), (1, 1))
        else:
            for index in range(10):
                block.add_blockref(inner, (index, 0))
        if cyclic:
            block.add_blockref(f"B{level}", (5, 5))
        inner = f"B{level}"
    assert inner is not None
    doc.modelspace().add_blockref(inner, (0, 0))
    stream = io.StringIO()
    doc.write(stream)
    return stream.getvalue().encode()


async def test_dxf_extents_of_deeply_nested_and_self_referencing_blocks_are_bounded(
    sqlite_engine, memory_bus, tmp_path
):
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        nested = await _extracted(client, "cad", ("bomb.dxf", _nested_blocks(8)))
        cyclic = await _extracted(client, "cad", ("cycle.dxf", _nested_blocks(1, cyclic=True)))
    # 10**7 lines side by side: x from 0 to 9 * 7 + 1, y from 0 to 1.
    assert nested["extents"] == [0.0, 0.0, 64.0, 1.0]
    assert nested["entity_counts"] == {"INSERT": 1}
    assert cyclic["extents"] == [0.0, 0.0, 1.0, 1.0]
    assert cyclic["errors"] >= 1  # the audit reports the cycle


def _minsert_of_empty_block(row_spacing: int) -> bytes:
    # 169 bytes: a 30000 by 30000 MINSERT grid of a block holding nothing (one code or value a
    # line, as a text DXF has them).
    tags = (
        "0 SECTION 2 BLOCKS 0 BLOCK 8 0 2 E 70 0 10 0 20 0 30 0 0 ENDBLK 0 ENDSEC"
        " 0 SECTION 2 ENTITIES 0 INSERT 8 0 2 E 10 0 20 0 30 0 70 30000 71 30000"
        f" 44 1 45 {row_spacing} 0 ENDSEC 0 EOF"
    )
    return "\n".join(tags.split()).encode() + b"\n"


def _nested_empty_blocks(levels: int) -> bytes:
    doc = ezdxf.new("R2000")
    doc.blocks.new("B0")
    for level in range(1, levels + 1):
        block = doc.blocks.new(f"B{level}")
        for index in range(10):
            block.add_blockref(f"B{level - 1}", (index, 0))
    doc.modelspace().add_line((0, 0), (1, 1))
    doc.modelspace().add_blockref(f"B{levels}", (0, 0))
    stream = io.StringIO()
    doc.write(stream)
    return stream.getvalue().encode()


async def test_dxf_extents_count_references_that_produce_no_geometry(
    sqlite_engine, memory_bus, tmp_path
):
    # Copies of an empty block measure nothing, yet each one costs: 9·10⁸ grid cells (also when
    # a zero row spacing makes the rows coincide), 10¹⁰ nested references.
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path, parse_timeout_seconds=5)) as (client, _):
        grid = await _extracted(client, "cad", ("grid.dxf", _minsert_of_empty_block(1)))
        rows = await _extracted(client, "cad", ("rows.dxf", _minsert_of_empty_block(0)))
        nested = await _extracted(client, "cad", ("nest.dxf", _nested_empty_blocks(10)))
    assert grid["entity_counts"] == rows["entity_counts"] == {"INSERT": 1}
    assert grid.get("extents") is rows.get("extents") is None
    assert nested["extents"] == [0.0, 0.0, 1.0, 1.0]


async def _extracted(client, route: str, file: tuple[str, bytes]) -> dict:
    response = await client.post(f"/api/edge-intake/{route}", **form(file))
    assert response.status_code == 200, response.text
    [evidence_id] = response.json()["evidence_ids"]
    return (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()["extracted"]


async def test_step_of_empty_statements_is_counted_in_linear_time(
    sqlite_engine, memory_bus, tmp_path
):
    # Two 1 MiB chunks of ";": each statement start used to copy the rest of its chunk.
    semicolons = b"ISO-10303-21;\n" + b";" * (2 << 20)
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path, parse_timeout_seconds=5)) as (client, _):
        extracted = await _extracted(client, "cad", ("semi.stp", semicolons))
    assert extracted["entity_instances"] == 0
