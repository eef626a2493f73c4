"""Whatever answers for a pack's leaf data in the server's place (a portal, a proxy gone wrong, an
attacker) is never kept as the pack's entry: each bad answer leaves it missing, asked for again
later, and the run neither fails nor waits longer than the receipt's deadline."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from conclave.edge_client import Outbox
from conclave.platform.transparency.receipt import MAX_DOCUMENT_BYTES
from tests.conftest import Backend
from tests.edge_client.conftest import edge_server, envelopes, in_process_client, media_files

Answer = Callable[[dict[str, Any]], bytes]
"""A hostile answer, made from the real one (``index``, ``leaf_hash``, ``data``)."""


def _json(text: str) -> Answer:
    return lambda real: text.replace("INDEX", str(real["index"])).encode()


HOSTILE: dict[str, Answer] = {
    "a portal's page": lambda real: b"<html>Please sign in to the hotel network</html>",
    "larger than 2 MiB": lambda real: b" " * (MAX_DOCUMENT_BYTES + 1),
    "another index": lambda real: json.dumps({**real, "index": real["index"] + 1}).encode(),
    "another leaf's data": lambda real: json.dumps(
        {**real, "data": base64.b64encode(b'{"format":"conclave.pack/v1"}').decode()}
    ).encode(),
    "a lone surrogate": _json('{"index": INDEX, "leaf_hash": "", "data": "\\ud800"}'),
    "NUL": _json('{"index": INDEX, "leaf_hash": "", "data": "\\u0000"}'),
    "a non-finite number": _json('{"index": NaN, "leaf_hash": "", "data": ""}'),
    "a huge integer": _json('{"index": 1' + "0" * 5000 + ', "leaf_hash": "", "data": ""}'),
    "the index as text": lambda real: json.dumps({**real, "index": str(real["index"])}).encode(),
    "data not base64": lambda real: json.dumps({**real, "data": real["data"] + "\n"}).encode(),
    "a key twice": lambda real: json.dumps(real).encode()[:-1] + b', "index": 0}',
    "deeply nested": lambda real: b"[" * 100_000 + b"]" * 100_000,
    "not UTF-8": lambda real: b'{"index": \xff}',
}


class HostileLeaves(httpx.AsyncBaseTransport):
    """The real edge, but a leaf's data is answered by ``answer`` (made from the real answer);
    ``stall`` makes it answer nothing at all."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.answer: Answer | None = None
        self.stall = False
        self.asked = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if "/leaves/" not in request.url.path or (self.answer is None and not self.stall):
            return response
        self.asked += 1
        if self.stall:
            await asyncio.sleep(30)
        assert self.answer is not None
        real = json.loads(await response.aread())
        headers = {"content-type": "application/json"}
        return httpx.Response(200, content=self.answer(real), headers=headers)


async def test_no_bad_answer_for_a_leaf_is_kept_as_its_entry(
    backend: Backend, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "outbox.sqlite3", receipt_wait_seconds=3.0)
    outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 1)))
    async with edge_server(backend, tmp_path / "server") as app:
        hostile = HostileLeaves(httpx.ASGITransport(app=app))
        async with in_process_client(app, transport=hostile) as client:
            hostile.answer = HOSTILE["a portal's page"]
            report = await outbox.sync(client)
            assert len(report.sent) == 1 and report.receipts == 0
            keys = await client.log_keys()
            for name, answer in HOSTILE.items():
                hostile.answer, asked = answer, hostile.asked
                assert await outbox.fetch_receipts(client, wait_seconds=0.3) == 0, name
                assert hostile.asked > asked, name
                [kept] = outbox.receipts()
                assert kept.receipt is not None and kept.entry is None, name
                [check] = outbox.check_receipts(keys)
                assert (check.status, check.detail) == (
                    "missing",
                    "the log's entry of the pack is not fetched yet",
                ), name
            hostile.answer = None
            assert await outbox.fetch_receipts(client, wait_seconds=30.0) == 1  # ends when kept
    assert [check.status for check in outbox.check_receipts(keys)] == ["verified"]
    outbox.close()


async def test_a_server_that_stalls_on_leaves_does_not_hold_the_run(
    backend: Backend, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "outbox.sqlite3", receipt_wait_seconds=2.0)
    outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 3)))
    async with edge_server(backend, tmp_path / "server") as app:
        hostile = HostileLeaves(httpx.ASGITransport(app=app))
        hostile.stall = True
        async with in_process_client(app, transport=hostile) as client:
            started = time.monotonic()
            report = await outbox.sync(client)
            took = time.monotonic() - started
    assert len(report.sent) == 3 and report.receipts == 0
    assert took < 25, f"the run took {took:.1f} s"  # not three stalled requests of 30 s
    assert len(outbox.receipts(missing_only=True)) == 3
    outbox.close()
