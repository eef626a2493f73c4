"""Geo files real tools write that the corpus does not carry: KML 2.2 tracks, late GeoJSON types."""

from __future__ import annotations

import json
from typing import Any

import httpx

from conclave.edge.sniff import HEAD_BYTES
from tests.conftest import Backend
from tests.edge.conftest import edge_app, edge_settings, form

# Google's KML 2.2 reference example of a gx:Track (positions are "lon lat alt", one per
# <gx:coord>), as Google Earth and phone loggers write them.
GX_TRACK = b"""<?xml version="1.0" encoding="UTF-8"?>
<kml xmlns="http://www.opengis.net/kml/2.2" xmlns:gx="http://www.google.com/kml/ext/2.2">
<Document><name>run</name>
  <Placemark><name>track</name>
    <gx:Track>
      <when>2010-05-28T02:02:09Z</when>
      <when>2010-05-28T02:02:35Z</when>
      <when>2010-05-28T02:02:44Z</when>
      <gx:coord>-122.207881 37.371915 156.000000</gx:coord>
      <gx:coord>-122.205712 37.373288 152.000000</gx:coord>
      <gx:coord>-122.204678 37.373939 147.000000</gx:coord>
    </gx:Track>
  </Placemark>
  <Placemark><name>start</name><Point><coordinates>-122.207881,37.371915,0</coordinates></Point>
  </Placemark>
</Document></kml>
"""


async def _upload(client: httpx.AsyncClient, name: str, content: bytes) -> httpx.Response:
    return await client.post("/api/edge-intake/geo", **form((name, content)))


async def _extracted(client: httpx.AsyncClient, name: str, content: bytes) -> Any:
    response = await _upload(client, name, content)
    assert response.status_code == 200, response.text
    [evidence_id] = response.json()["evidence_ids"]
    pack = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()
    return pack["extracted"]


async def test_kml_tracks_are_located_by_their_coords(sqlite_engine, memory_bus, tmp_path):
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        extracted = await _extracted(client, "run.kml", GX_TRACK)
    assert extracted["feature_count"] == 2
    assert extracted["geometry_types"] == {"Track": 1, "Point": 1}
    assert extracted["bbox"] == [-122.207881, 37.371915, -122.204678, 37.373939]


async def test_geojson_is_judged_by_the_whole_document_when_its_type_comes_late(
    sqlite_engine, memory_bus, tmp_path
):
    # QGIS, fiona and hand-edited files may put "type" after the features, past the sniffed head.
    point = {"coordinates": [7.5, 45.1], "type": "Point"}
    feature = {"properties": {"name": "x" * 100}, "geometry": point, "type": "Feature"}
    features = [feature] * (HEAD_BYTES // 100)
    late = json.dumps({"features": features, "type": "FeatureCollection"}).encode()
    not_geojson = json.dumps({"features": features, "kind": "inventory"}).encode()
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        extracted = await _extracted(client, "late.geojson", late)
        refused = await _upload(client, "inventory.json", not_geojson)
    assert late.find(b'"type": "FeatureCollection"') > HEAD_BYTES
    assert extracted["feature_count"] == len(features)
    assert extracted["bbox"] == [7.5, 45.1, 7.5, 45.1]
    assert refused.status_code == 415
    assert refused.json()["code"] == "UNSUPPORTED_MEDIA_TYPE"


async def test_gpx_with_a_dtd_and_kml_nested_too_deep_are_refused(
    sqlite_engine, memory_bus, tmp_path
):
    # An internal entity of 30 track points referenced 2000 times: expat would expand it 100-fold
    # in memory. GPX has no DTD, so any is refused.
    points = "<trkpt lat='1' lon='1'/>" * 30
    entities = (
        f'<?xml version="1.0"?><!DOCTYPE gpx [<!ENTITY e "{points}">]>'
        f'<gpx version="1.1" creator="x"><trk><trkseg>{"&e;" * 2000}</trkseg></trk></gpx>'
    ).encode()
    deep = b"<kml>" + b"<Folder>" * 1000 + b"</Folder>" * 1000 + b"</kml>"
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        for name, content in [("bomb.gpx", entities), ("deep.kml", deep)]:
            response = await _upload(client, name, content)
            assert response.status_code == 422, (name, response.text)
            assert response.json()["code"] == "CORRUPT_MEDIA"


async def test_a_long_kml_coordinates_text_is_read_in_slices(sqlite_engine, memory_bus, tmp_path):
    # Three megabytes of tuples, with and without altitude, the extremes far apart: every slice
    # the text is cut into counts, whichever way its tuples are written.
    plain = "7.5,45.1 " * 150_000
    with_altitude = "7.5,45.1,300 " * 100_000
    tuples = f"-3.25,40.5 {plain}{with_altitude}7.5,45.1 {plain}12.75,47.0,10"
    kml = (
        '<kml xmlns="http://www.opengis.net/kml/2.2"><Placemark><LineString><coordinates>'
        f"{tuples}</coordinates></LineString></Placemark></kml>"
    ).encode()
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        extracted = await _extracted(client, "long.kml", kml)
    assert extracted["bbox"] == [-3.25, 40.5, 12.75, 47.0]
    assert extracted["positions"] == 2 + 150_000 * 2 + 100_000 + 1
