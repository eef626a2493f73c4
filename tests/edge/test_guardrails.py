"""Bad input gets a clear problem answer and stores nothing."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import struct
import threading
import time
from multiprocessing.connection import Connection

import pytest
import uvloop

from conclave.edge.agents.base import clean
from conclave.edge.guardrails import sanitize_filename
from conclave.edge.parser_worker import answer_bytes
from conclave.edge.parsing import ParserPool, receive_message
from conclave.platform.errors import Unprocessable
from tests.conftest import Backend, eventually
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


def _slow_geojson(path, features: int) -> None:
    point = '{"type":"Feature","geometry":{"type":"Point","coordinates":[1.0,2.0]}},'
    path.write_text(
        '{"type":"FeatureCollection","features":[' + point * features + point[:-1] + "]}"
    )


def _send_in_two_parts(connection: Connection, answer: object) -> None:
    # What a worker's large answer looks like to the reader: part of it, then a pause while the
    # pipe's buffer drains, then the rest (multiprocessing's framing: a 4-byte length first).
    payload = answer_bytes(answer)
    message = memoryview(struct.pack("!i", len(payload)) + payload)
    os.write(connection.fileno(), message[:1000])
    time.sleep(0.2)
    message = message[1000:]
    while message:
        message = message[os.write(connection.fileno(), message) :]


def test_a_result_larger_than_the_pipe_arrives_whole_under_uvloop() -> None:
    """uvicorn runs on uvloop, which leaves a watched pipe non-blocking: a parser's answer that
    arrived in parts used to fail halfway (BlockingIOError) and a valid file was refused as
    corrupt."""
    receiving, sending = multiprocessing.Pipe()
    answer = ("ok", {"layers": ["é" * 500] * 2000})  # about 6 MB of JSON, far past 64 KiB
    sender = threading.Thread(target=_send_in_two_parts, args=(sending, answer))
    loop = uvloop.new_event_loop()
    try:
        sender.start()
        assert loop.run_until_complete(receive_message(receiving, 5)) == list(answer)
    finally:
        sender.join()
        loop.close()
        receiving.close()
        sending.close()


async def test_an_upload_waits_a_bounded_time_for_a_busy_parser(embedded, tmp_path) -> None:
    slow = tmp_path / "slow.geojson"
    _slow_geojson(slow, 400_000)
    settings = edge_settings(tmp_path, parser_queue_seconds=0.2, parser_prestart=False)
    async with edge_app(embedded, settings) as (client, app):
        busy = asyncio.create_task(
            client.post("/api/edge-intake/geo", **form(("slow.geojson", slow.read_bytes())))
        )

        async def taken() -> bool:  # the only worker (its slot) is the slow file's
            return bool(app.state.parsers.free == 0)

        await eventually(taken)
        refused = await client.post(
            "/api/edge-intake/geo", **form(("a.geojson", samples.geojson()))
        )
        assert refused.status_code == 503
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["code"] == "PARSERS_BUSY"
        assert refused.headers["Retry-After"] == "1"
        assert (await busy).status_code == 200
        # The worker went back to the pool: the next upload is parsed as usual.
        again = await client.post("/api/edge-intake/geo", **form(("a.geojson", samples.geojson())))
        assert again.status_code == 200, again.text


async def test_all_the_files_of_one_upload_share_one_parse_budget(embedded, tmp_path) -> None:
    slow = tmp_path / "slow.geojson"
    _slow_geojson(slow, 400_000)
    files = [(f"slow-{n}.geojson", slow.read_bytes()) for n in range(3)]
    settings = edge_settings(tmp_path, parse_request_seconds=0.5)
    async with edge_app(embedded, settings) as (client, _app):
        response = await client.post("/api/edge-intake/geo", **form(files))
        assert response.status_code == 422
        assert response.json()["code"] == "PARSE_TIMEOUT"
        pipeline = (await client.get("/api/edge-intake/pipeline")).json()
        assert pipeline["total_events"] == 0  # all or none: nothing was stored


def test_a_summary_is_bounded_in_size_and_says_when_it_was_cut() -> None:
    layers = [f"{n:04d}" + "é" * 508 for n in range(500)]
    summary = {"layers": layers, "blocks": {"b": [layers] * 8}, "format": "dxf", "layer_count": 500}
    facts = clean(summary)
    stored = json.dumps(facts, ensure_ascii=False).encode()
    assert len(stored) < 600_000  # was 2.3 MB in the stored row and again in the event
    assert b"null" not in stored  # cut lists end early, they are not padded
    assert facts["facts_truncated"] is True
    assert (facts["format"], facts["layer_count"]) == ("dxf", 500)  # kept, though named last
    assert list(facts)[:2] == ["layers", "blocks"]  # in the agent's order
    assert facts["layers"][:2] == layers[:2]
    assert "facts_truncated" not in clean({"format": "dxf", "layers": layers[:10]})


async def test_a_cancelled_parse_does_not_hand_its_answer_to_the_next_upload(tmp_path) -> None:
    slow = tmp_path / "slow.geojson"
    _slow_geojson(slow, 200_000)
    small = tmp_path / "small.geojson"
    small.write_bytes(samples.geojson())
    pool = ParserPool(1, timeout=30, memory_bytes=2 * 1024**3)
    try:
        await pool.prestart()
        parsing = asyncio.create_task(pool.parse("geo", str(slow), "geojson", {}))
        await asyncio.sleep(0.2)  # the worker is busy with the slow file
        parsing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await parsing
        facts = await pool.parse("geo", str(small), "geojson", {})
        assert facts["feature_count"] == 2  # its own answer, not the slow file's
    finally:
        await pool.close()


def test_a_worker_answer_that_is_a_pickle_is_never_unpickled() -> None:
    """A worker taken over by a hostile file could answer a pickle that runs code when loaded:
    the service reads answers as JSON only, and anything else is a crashed parser (OSError)."""
    receiving, sending = multiprocessing.Pipe()
    sending.send(("ok", {"facts": 1}))  # multiprocessing's own send: a pickle
    loop = uvloop.new_event_loop()
    try:
        with pytest.raises(OSError, match="not JSON"):
            loop.run_until_complete(receive_message(receiving, 5))
    finally:
        loop.close()
        receiving.close()
        sending.close()
