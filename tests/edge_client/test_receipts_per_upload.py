"""Every upload the device sent is checked for a receipt of its own, and no answer to an upload,
however shaped or however slowly sent, stops a sync run (the fixes of the attack in
``test_attack_receipts.py``, seen from the command line and the outbox's rows)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from conclave.cli.main import app as cli
from conclave.edge_client import Outbox, SyncReport
from conclave.edge_client.client import MAX_ANSWER_BYTES
from tests.conftest import Backend
from tests.edge_client.conftest import edge_server, envelopes, in_process_client, media_files
from tests.edge_client.test_attack_receipts import InTheMiddle, Rewrite

runner = CliRunner()


async def _sync_through(
    backend: Backend, tmp_path: Path, outbox: Outbox, rewrite: Rewrite, **client: Any
) -> tuple[SyncReport, str]:
    """One sync run of ``outbox`` with ``rewrite`` in the middle; the run's report and the log's
    keys as the server publishes them."""
    async with edge_server(backend, tmp_path / "server") as app:
        hostile = InTheMiddle(httpx.ASGITransport(app=app), rewrite)
        async with in_process_client(app, transport=hostile, **client) as edge:
            report = await asyncio.wait_for(outbox.sync(edge), 30)
            return report, await edge.log_keys()


async def test_the_command_lists_an_upload_without_a_receipt_of_its_own(
    backend: Backend, tmp_path: Path
) -> None:
    """The second upload's answer names the first's pack: the check lists it ``invalid`` (exit
    1), in the table and as JSON, beside the first pack's ``verified`` receipt."""
    path = tmp_path / "outbox.sqlite3"
    outbox = Outbox(path, receipt_wait_seconds=3.0)
    outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 2)))
    first: list[bytes] = []

    def reuse(request: httpx.Request, response: httpx.Response) -> httpx.Response | None:
        if request.method != "POST" or response.status_code != 200:
            return None
        if not first:
            first.append(response.content)
            return None
        return httpx.Response(200, content=first[0], headers={"content-type": "application/json"})

    report, keys = await _sync_through(backend, tmp_path, outbox, reuse)
    assert report.sent == [1, 2] and report.receipts == 1
    [evidence_id] = json.loads(first[0])["evidence_ids"]
    outbox.close()

    key_file = tmp_path / "keys.json"
    key_file.write_text(keys)
    environment = {"CONCLAVE_EDGE_OUTBOX": str(path), "CORE_EDGE_API_TOKEN": ""}
    checked = runner.invoke(
        cli, ["edge", "receipts", "--check", "--key", str(key_file)], env=environment
    )
    assert checked.exit_code == 1, checked.output
    assert "no link" in checked.output and "invalid" in checked.output
    listed = runner.invoke(
        cli, ["edge", "receipts", "--check", "--key", str(key_file), "--json"], env=environment
    )
    rows = json.loads(listed.output)["receipts"]
    assert [(row["item_id"], row["evidence_id"], row["check"]) for row in rows] == [
        (1, evidence_id, "verified"),
        (2, evidence_id, "invalid"),
    ]
    assert rows[1]["log_leaf_hash"] is None and rows[1]["receipt"] is None


async def test_a_server_that_links_no_receipt_at_all_is_not_listed(
    backend: Backend, tmp_path: Path
) -> None:
    """A server that never linked a receipt keeps no log (``EDGE_PACK_LOG=false``, an older
    edge): its uploads are not listed as missing, there is nothing to fetch."""
    outbox = Outbox(tmp_path / "outbox.sqlite3", receipt_wait_seconds=1.0)
    outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 2)))

    def no_links(request: httpx.Request, response: httpx.Response) -> httpx.Response | None:
        if request.method != "POST" or response.status_code != 200:
            return None
        return httpx.Response(200, json={**json.loads(response.content), "receipts": []})

    report, keys = await _sync_through(backend, tmp_path, outbox, no_links)
    assert report.sent == [1, 2] and report.receipts == 0
    assert outbox.check_receipts(keys) == []
    outbox.close()


async def test_an_error_answer_with_nul_is_kept_escaped(backend: Backend, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 1)))
    body = b'{"code": "BAD\\u0000", "detail": "cut\\u0000here \\ud800"}'

    def refuse(request: httpx.Request, response: httpx.Response) -> httpx.Response | None:
        if request.method != "POST":
            return None
        return httpx.Response(400, content=body, headers={"content-type": "application/json"})

    report, _ = await _sync_through(backend, tmp_path, outbox, refuse)
    assert report.failed == [1]
    [failed] = outbox.last_errors()
    assert failed.last_error == "HTTP 400 BAD\\x00: cut\\x00here \\ud800"
    outbox.close()


async def test_an_oversized_upload_answer_is_retried_later(
    backend: Backend, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 1)))
    padding = "x" * (MAX_ANSWER_BYTES + 1)

    def oversized(request: httpx.Request, response: httpx.Response) -> httpx.Response | None:
        if request.method != "POST" or response.status_code != 200:
            return None
        return httpx.Response(200, json={**json.loads(response.content), "message": padding})

    report, _ = await _sync_through(backend, tmp_path, outbox, oversized)
    assert report.retrying == [1]
    [failed] = outbox.last_errors()
    assert failed.last_error == f"HTTP 200: an answer larger than {MAX_ANSWER_BYTES} bytes"
    outbox.close()


class _Drip(httpx.AsyncByteStream):
    """A body that never ends, a byte every 50 ms: under any per-read time-out."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            await asyncio.sleep(0.05)
            yield b" "


async def test_an_upload_answer_that_drips_does_not_hold_the_run(
    backend: Backend, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 1)))

    def drip(request: httpx.Request, response: httpx.Response) -> httpx.Response | None:
        return httpx.Response(200, stream=_Drip()) if request.method == "POST" else None

    report, _ = await _sync_through(backend, tmp_path, outbox, drip, timeout=0.5)
    assert report.retrying == [1]
    [failed] = outbox.last_errors()
    assert failed.last_error == "Timed out: TimeoutError"
    outbox.close()
