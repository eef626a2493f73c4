"""Bad input gets a clear problem answer and stores nothing."""

from __future__ import annotations

import pytest

from conclave.edge.guardrails import sanitize_filename
from conclave.edge.parsing import ParserPool
from conclave.platform.errors import Unprocessable
from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings, form


@pytest.fixture
def embedded(sqlite_engine, memory_bus) -> Backend:
    """Guardrails do not depend on the store: SQLite is enough."""
    return Backend("embedded", sqlite_engine, memory_bus)


async def test_bad_inputs_are_refused_with_the_documented_status(embedded, tmp_path) -> None:
    settings = edge_settings(tmp_path, max_upload_bytes={"image": 2000})
    jpeg = samples.jpeg_with_gps()
    gpx = ("g.gpx", samples.gpx())
    bad_dxf = b"0\nSECTION\n2\nENTITIES\n0\nLINE\n10\nnope\n"
    cases = [
        ("sculpture", form(("a.png", samples.png())), 404, "UNKNOWN_MEDIA_TYPE"),
        ("image", form(("a.pdf", samples.pdf())), 415, "UNSUPPORTED_MEDIA_TYPE"),
        ("audio", form(("a.wav", samples.png())), 415, "UNSUPPORTED_MEDIA_TYPE"),
        ("document", form(("a.zip", samples.kmz())), 415, "UNSUPPORTED_MEDIA_TYPE"),
        ("image", form(("big.jpg", jpeg + b"\0" * 2000)), 413, "PAYLOAD_TOO_LARGE"),
        ("image", form(("e.png", b"")), 422, "EMPTY_FILE"),
        ("geo", form(gpx, "[1, 2]"), 422, "INVALID_METADATA"),
        ("geo", form(gpx, "{oops"), 422, "INVALID_METADATA"),
        ("geo", form(gpx, {"lat": 91}), 422, "INVALID_COORDINATES"),
        ("geo", form(gpx, {"longitude": -180.5}), 422, "INVALID_COORDINATES"),
        ("geo", form(gpx, {"x": "y" * 70000}), 422, "METADATA_TOO_LARGE"),
        ("image", form(("bad.png", b"\x89PNG\r\n\x1a\n" + b"junk" * 50)), 422, "CORRUPT_MEDIA"),
        ("cad", form(("bad.dxf", bad_dxf)), 422, "CORRUPT_MEDIA"),
        (
            "geo",
            form(("bad.json", b'{"type": "FeatureCollection", "features": [')),
            422,
            "CORRUPT_MEDIA",
        ),
        ("image", {"files": {"metadata": (None, "{}")}}, 422, "MISSING_FILE"),
    ]
    async with edge_app(embedded, settings) as (client, _app):
        for media_type, kwargs, status, code in cases:
            path = f"/api/edge-intake/{media_type}"
            response = await client.post(path, **kwargs)
            assert response.status_code == status, (path, code, response.text)
            assert response.headers["content-type"].startswith("application/problem+json")
            assert response.json()["code"] == code, (path, response.json())
        not_multipart = await client.post("/api/edge-intake/image", content=b"{}",
                                          headers={"content-type": "application/json"})  # fmt: skip
        assert not_multipart.status_code == 415
        unknown = await client.post("/api/edge-intake/sculpture", **form(("a", b"x")))
        assert "landscape" in unknown.json()["detail"]

        events = (await client.get("/api/edge-intake/events")).json()
        assert events["count"] == 0
        pipeline = (await client.get("/api/edge-intake/pipeline")).json()
        assert pipeline["total_events"] == 0
        assert pipeline["recent_errors"] == len(cases) + 2
        assert not list((tmp_path / "blobs" / "tmp").iterdir())  # no temporary file left behind


def test_file_names_are_neutralised() -> None:
    assert sanitize_filename("../../etc/passwd") == "passwd"
    assert sanitize_filename("C:\\Users\\x\\photo.jpg") == "photo.jpg"
    assert sanitize_filename("evil\r\nname\x00.png") == "evilname.png"
    assert sanitize_filename("...") == "upload"
    long = sanitize_filename("a" * 400 + ".jpeg")
    assert len(long.encode()) <= 255 and long.endswith(".jpeg")


async def test_stored_file_name_is_sanitised(embedded, tmp_path) -> None:
    async with edge_app(embedded, edge_settings(tmp_path)) as (client, _app):
        response = await client.post(
            "/api/edge-intake/image", **form(("../../../etc/x.png", samples.png()))
        )
        [evidence_id] = response.json()["evidence_ids"]
        pack = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()
        assert pack["filename"] == "x.png"


async def test_a_parser_that_runs_too_long_is_stopped_and_replaced(tmp_path) -> None:
    big = tmp_path / "big.geojson"
    point = '{"type":"Feature","geometry":{"type":"Point","coordinates":[1.0,2.0]}},'
    big.write_text('{"type":"FeatureCollection","features":[' + point * 200_000 + point[:-1] + "]}")
    small = tmp_path / "small.geojson"
    small.write_bytes(samples.geojson())
    pool = ParserPool(1, timeout=30, memory_bytes=2 * 1024**3)
    try:
        with pytest.raises(Unprocessable) as caught:
            await pool.parse("geo", str(big), "geojson", {}, time_limit=0.05)
        assert caught.value.code == "PARSE_TIMEOUT"
        facts = await pool.parse("geo", str(small), "geojson", {})
        assert facts["feature_count"] == 2
    finally:
        await pool.close()


async def test_a_worker_started_ahead_serves_the_first_uploads(tmp_path) -> None:
    small = tmp_path / "small.geojson"
    small.write_bytes(samples.geojson())
    pool = ParserPool(2, timeout=30, memory_bytes=2 * 1024**3)
    try:
        await pool.prestart()
        [started] = pool._all
        assert started.process.is_alive()
        for _ in range(3):  # one after the other: the started worker takes them all
            facts = await pool.parse("geo", str(small), "geojson", {})
            assert facts["feature_count"] == 2
        assert pool._all == {started}
    finally:
        await pool.close()
