"""A media type plug-in is code the edge does not know: what it answers is checked, its sniffer
and extractor run under a parser worker's limits, and a plug-in that fails to load or names a
taken type is left out without taking anything else down."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from conclave.platform.media_types import media_type_names
from tests.conftest import Backend
from tests.edge.conftest import edge_app, edge_settings, form
from tests.edge_client.test_media_type_plugin import conclave_edge

BUILT_IN = ("document", "image", "audio", "video", "cad", "landscape", "geo")

HOSTILE = """
import time

from conclave.edge.agents.base import CorruptMedia
from conclave.platform.media_types import MediaType, MiB


def sniff(head, size):
    if head.startswith(b"SLOW"):
        while True:
            pass
    if head.startswith(b"BADM"):
        return ("x", "text/plain\\r\\nX-Injected: 1")
    return ("hst", "application/x-hostile") if head.startswith(b"HST") else None


def extract(path, fmt, metadata):
    with open(path, "rb") as handle:
        data = handle.read()
    if data.startswith(b"HSTE"):
        raise CorruptMedia("bad record: " + data.decode("latin-1"))
    return {
        "nul": "a" + chr(0) + "b",
        "lone": "x" + chr(0xD800),
        "nan": float("nan"),
        "big": 10**30,
        "format": "plugin-fact",
        "mime": "text/html; charset=utf-8",
        "mime" + chr(0): "text/html",
    }


HOSTILE = MediaType("hostile", 5 * MiB, sniff=sniff, extract=extract)
IMPOSTOR = MediaType("image", 5 * MiB, sniff=sniff, extract=extract)


def slow():
    time.sleep(3)  # a plug-in whose import takes its time (a model, a large table)
    return MediaType("slow", 5 * MiB, sniff=sniff, extract=extract)
"""


def install(tmp_path: Path, entry_points: str) -> Path:
    """A site directory holding the plug-in module and a distribution naming ``entry_points``."""
    site = tmp_path / "site"
    info = site / "hostile_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (site / "hostile_plugin.py").write_text(HOSTILE, encoding="utf-8")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hostile-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[conclave.media_types]\n{entry_points}\n")
    return site


async def test_a_plugin_answer_is_checked_and_bounded(
    backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(install(tmp_path, "hostile = hostile_plugin:HOSTILE")))
    # Long enough for a loaded machine's /health to be asked and answered (below) while the
    # sniffer that never returns still holds its worker.
    settings = edge_settings(tmp_path, parse_timeout_seconds=6.0)
    async with edge_app(backend, settings) as (client, _app):
        created = await client.post("/api/edge-intake/hostile", **form(("a.hst", b"HST1\n")))
        assert created.status_code == 200, created.text
        [evidence_id] = created.json()["evidence_ids"]
        pack = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()
        # The extractor's facts are cleaned as a built-in agent's: no NUL, no lone surrogate,
        # no NaN, no integer beyond 64 bits; its `mime` with parameters is not taken.
        assert pack["mime_type"] == "application/x-hostile"
        extracted = pack["extracted"]
        assert "\x00" not in extracted["nul"] and extracted["nul"].startswith("a")
        assert extracted["lone"].startswith("x") and "\ud800" not in extracted["lone"]
        assert extracted["nan"] is None and extracted["big"] is None
        # A plug-in's facts named like the pack's fields stay facts; only its own exact `mime`
        # key may set the MIME type, and only as a bare type/subtype.
        assert extracted["format"] == "plugin-fact"
        assert pack["format"] == "hst"
        json.dumps(pack, allow_nan=False).encode()

        # A refusal that quotes the file is bounded and cleaned before it is answered.
        quoted = b"HSTE\x00\x01\x1b[31m" + b"A" * (1 << 20)
        refused = await client.post("/api/edge-intake/hostile", **form(("q.hst", quoted)))
        assert refused.status_code == 422
        assert refused.json()["code"] == "CORRUPT_MEDIA"
        assert len(refused.content) < 4096
        assert "\x1b" not in refused.json()["detail"] and "\x00" not in refused.json()["detail"]

        header = await client.post("/api/edge-intake/hostile", **form(("b.hst", b"BADM\n")))
        assert header.status_code == 422
        assert header.json()["code"] == "CORRUPT_MEDIA"

        # A sniffer that never returns holds a parser worker, not the event loop.
        slow = asyncio.create_task(
            client.post("/api/edge-intake/hostile", **form(("c.hst", b"SLOW\n")))
        )
        await asyncio.sleep(0.5)
        started = time.monotonic()
        health = await client.get("/health")
        assert health.status_code == 200
        assert time.monotonic() - started < 3.0
        assert not slow.done()
        answer = await slow
        assert answer.status_code == 422
        assert answer.json()["code"] == "PARSE_TIMEOUT"

        again = await client.post("/api/edge-intake/hostile", **form(("d.hst", b"HST2\n")))
        assert again.status_code == 200, again.text


def test_a_broken_or_clashing_plugin_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    site = install(tmp_path, "broken = no_such_module:TYPE\nimpostor = hostile_plugin:IMPOSTOR")
    monkeypatch.syspath_prepend(str(site))
    with caplog.at_level("ERROR", logger="conclave.platform.media_types"):
        assert media_type_names() == BUILT_IN
    messages = [record.getMessage() for record in caplog.records]
    assert any("no_such_module" in message for message in messages)
    assert any("'image' is registered twice" in message for message in messages)

    helped = conclave_edge("enqueue", "--help", tmp_path=tmp_path, site=site)
    assert helped.returncode == 0, helped.stderr
    assert "landscape or geo" in helped.stdout


async def test_a_plugin_loads_before_its_first_upload_is_timed(
    backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parser worker loads the plug-ins while it starts, not within an upload's limit."""
    monkeypatch.syspath_prepend(str(install(tmp_path, "slow = hostile_plugin:slow")))
    settings = edge_settings(tmp_path, parse_timeout_seconds=2.0)
    async with edge_app(backend, settings) as (client, _app):
        created = await client.post("/api/edge-intake/slow", **form(("a.hst", b"HST1\n")))
        assert created.status_code == 200, created.text
