"""The edge client keeps the transparency receipts of what it sent: a sync run asks for each sent
pack's receipt while it goes on (the item is SENT first), keeps it in the outbox beside the item,
and checks it on the device with the log's verifier keys; a receipt not signed in time is asked
for again later."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from conclave.cli.main import app as cli
from conclave.edge import store
from conclave.edge.pack_log import pack_entry
from conclave.edge_client import Envelope, Outbox
from conclave.edge_client.receipts import check_receipt
from conclave.platform.transparency import generate_key
from conclave.platform.transparency.receipt import MAX_DOCUMENT_BYTES
from tests.conftest import Backend
from tests.edge_client.conftest import edge_server, in_process_client, media_files

runner = CliRunner()


def envelopes(paths: list[Path]) -> list[Envelope]:
    return [Envelope.for_file("image", path) for path in paths]


async def test_a_sync_keeps_each_packs_receipt_and_it_verifies_on_the_device(
    backend: Backend, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 3)))
    async with (
        edge_server(backend, tmp_path / "server") as app,
        in_process_client(app) as client,
    ):
        report = await outbox.sync(client, concurrency=2)
        keys = await client.log_keys("packs")
    assert len(report.sent) == 3 and report.receipts == 3
    kept = outbox.receipts()
    assert len(kept) == 3 and all(found.receipt for found in kept)
    sent = {item.id: item.evidence_ids for item in outbox.sent()}
    assert {found.item_id: [found.evidence_id] for found in kept} == sent
    checks = outbox.check_receipts(keys)
    assert [check.status for check in checks] == ["verified"] * 3, checks
    for found in kept:
        # Offline, against the entry rebuilt from the server's stored row.
        row = await store.get_pack(backend.engine, found.evidence_id)
        assert row is not None and found.receipt is not None
        check_receipt(found.receipt, keys, pack_entry(row))
    # Cleaning the sent items keeps their receipts: they are the device's proof.
    assert outbox.cleanup() == 3
    assert len(outbox.receipts()) == 3
    outbox.close()


async def test_a_receipt_not_signed_in_time_is_fetched_later(
    backend: Backend, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "outbox.sqlite3", receipt_wait_seconds=0.0)
    outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 2)))
    # A checkpoint at most every 3 s: the first ask, right after the upload, finds no leaf yet.
    async with (
        edge_server(backend, tmp_path / "server", tlog_checkpoint_interval_seconds=3.0) as app,
        in_process_client(app) as client,
    ):
        report = await outbox.sync(client)
        assert len(report.sent) == 2 and report.receipts == 0
        assert [item.state for item in outbox.sent()] == ["SENT", "SENT"]
        assert [check.status for check in outbox.check_receipts(await client.log_keys())] == [
            "missing",
            "missing",
        ]
        assert len(outbox.receipts(missing_only=True)) == 2
        assert await outbox.fetch_receipts(client, wait_seconds=8.0) == 2
        keys = await client.log_keys()
    assert not outbox.receipts(missing_only=True)
    assert [check.status for check in outbox.check_receipts(keys)] == ["verified"] * 2
    outbox.close()


async def test_a_changed_receipt_or_another_key_is_refused(
    backend: Backend, tmp_path: Path
) -> None:
    path = tmp_path / "outbox.sqlite3"
    outbox = Outbox(path)
    outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 2)))
    async with (
        edge_server(backend, tmp_path / "server") as app,
        in_process_client(app) as client,
    ):
        await outbox.sync(client)
        keys = await client.log_keys()
    first, second = outbox.receipts()
    assert first.receipt is not None and second.receipt is not None
    _, stranger = generate_key("conclave.localhost/packs")
    assert {check.status for check in outbox.check_receipts([stranger])} == {"invalid"}

    # The second item's row now holds the first's receipt: valid, but of another leaf.
    outbox._store.save_receipt(second.evidence_id, first.receipt, 0.0)
    document = json.loads(first.receipt)
    document["index"] += 1
    outbox._store.save_receipt(first.evidence_id, json.dumps(document), 0.0)
    checks = {check.evidence_id: check for check in outbox.check_receipts(keys)}
    assert checks[first.evidence_id].status == "invalid"
    assert checks[second.evidence_id].status == "invalid"
    assert "another leaf" in checks[second.evidence_id].detail
    outbox.close()

    # The command line: the same check with a key given, and the receipts as JSON.
    key_file = tmp_path / "keys.json"
    key_file.write_text(keys)
    environment = {"CONCLAVE_EDGE_OUTBOX": str(path), "CORE_EDGE_API_TOKEN": ""}
    result = runner.invoke(
        cli, ["edge", "receipts", "--check", "--key", str(key_file)], env=environment
    )
    assert result.exit_code == 1, result.output
    assert "invalid" in result.output
    listed = runner.invoke(cli, ["edge", "receipts", "--json"], env=environment)
    assert listed.exit_code == 0, listed.output
    receipts = json.loads(listed.output)["receipts"]
    assert {found["evidence_id"] for found in receipts} == {first.evidence_id, second.evidence_id}
    assert all(found["receipt"]["format"] == "conclave.receipt/v1" for found in receipts)


async def test_the_command_checks_kept_receipts_with_a_given_key(
    backend: Backend, tmp_path: Path
) -> None:
    path = tmp_path / "outbox.sqlite3"
    outbox = Outbox(path)
    outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 1)))
    async with (
        edge_server(backend, tmp_path / "server") as app,
        in_process_client(app) as client,
    ):
        await outbox.sync(client)
        [vkey] = [key["vkey"] for key in json.loads(await client.log_keys())["keys"]]
    outbox.close()
    environment = {"CONCLAVE_EDGE_OUTBOX": str(path), "CORE_EDGE_API_TOKEN": ""}
    result = runner.invoke(cli, ["edge", "receipts", "--check", "--key", vkey], env=environment)
    assert result.exit_code == 0, result.output
    assert "verified" in result.output
    binary = tmp_path / "key.bin"
    binary.write_bytes(b"\xff\xfe\x00 not a key")
    for key in ("nonsense", str(binary)):
        bad = runner.invoke(cli, ["edge", "receipts", "--check", "--key", key], env=environment)
        assert bad.exit_code == 2, bad.output
        assert "no usable verifier key" in " ".join(bad.output.split())


def answering_receipts_with(app: Any, answer: Callable[[Any], Awaitable[None]]) -> Any:
    """``app`` behind something else answering its receipt paths (a captive portal, a proxy
    gone wrong, a server that stalls): every other request reaches the real app."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and "/receipt/by-hash/" in scope["path"]:
            await answer(send)
            return
        await app(scope, receive, send)

    return wrapped


def page(body: bytes, content_type: bytes = b"text/html") -> Callable[[Any], Awaitable[None]]:
    async def answer(send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", content_type)]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    return answer


async def test_what_is_not_the_named_receipt_is_not_kept(backend: Backend, tmp_path: Path) -> None:
    """A portal's page, a body larger than a receipt can be, another leaf's receipt: none is
    kept (each stays missing, asked for again later), and the real one is kept then."""
    outbox = Outbox(tmp_path / "outbox.sqlite3", receipt_wait_seconds=1.0)
    outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 1)))
    async with edge_server(backend, tmp_path / "server") as app:
        for answer in (
            page(b"<html>Please sign in to the hotel network</html>"),
            page(b" " * (MAX_DOCUMENT_BYTES + 1), b"application/json"),
        ):
            transport = httpx.ASGITransport(app=answering_receipts_with(app, answer))
            async with in_process_client(app, transport=transport) as client:
                if not outbox.sent():
                    assert len((await outbox.sync(client)).sent) == 1
                else:
                    assert await outbox.fetch_receipts(client, wait_seconds=0.5) == 0
            assert len(outbox.receipts(missing_only=True)) == 1
            listed = runner.invoke(
                cli, ["edge", "receipts", "--outbox", str(outbox.path), "--json"]
            )
            assert listed.exit_code == 0, listed.output
        async with in_process_client(app) as client:
            assert await outbox.fetch_receipts(client, wait_seconds=8.0) == 1
    assert not outbox.receipts(missing_only=True)
    outbox.close()


async def test_a_server_that_stalls_does_not_hold_the_run(backend: Backend, tmp_path: Path) -> None:
    async def stall(_send: Any) -> None:
        await asyncio.sleep(30)

    outbox = Outbox(tmp_path / "outbox.sqlite3", receipt_wait_seconds=0.5)
    outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 4)))
    async with edge_server(backend, tmp_path / "server") as app:
        transport = httpx.ASGITransport(app=answering_receipts_with(app, stall))
        async with in_process_client(app, transport=transport) as client:
            started = time.monotonic()
            report = await outbox.sync(client)
            took = time.monotonic() - started
    assert len(report.sent) == 4 and report.receipts == 0
    assert took < 25, f"the run took {took:.1f} s"  # not 4 stalled requests of 30 s
    assert len(outbox.receipts(missing_only=True)) == 4
    outbox.close()
