"""A kept receipt proves it is of the bytes the device sent: with each receipt the client keeps
its pack's leaf data (the log's ``conclave.pack/v1`` entry) and the check compares the entry with
what the device recorded when it sent the file. A server that names another device's leaf, or a
leaf whose entry misstates the upload, ends ``invalid``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from conclave.cli.main import app as cli
from conclave.edge import store
from conclave.edge.pack_log import pack_entry
from conclave.edge_client import Outbox
from conclave.edge_client.store import SCHEMA_VERSION
from conclave.platform.tlog.entries import canonical_json
from conclave.platform.transparency import leaf_hash
from tests.conftest import Backend
from tests.edge_client.conftest import edge_server, envelopes, in_process_client, media_files

runner = CliRunner()


class NamingOtherLeaves(httpx.AsyncBaseTransport):
    """A hostile server in front of the real edge: every request reaches it, but the answer of
    an upload names, as its pack's leaf, the leaf hash ``choose(evidence_id)`` returns."""

    def __init__(
        self, inner: httpx.AsyncBaseTransport, choose: Callable[[str], Awaitable[str]]
    ) -> None:
        self.inner, self.choose = inner, choose

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method != "POST" or response.status_code != 200:
            return response
        body = json.loads(await response.aread())
        [evidence_id] = body["evidence_ids"]
        hashed = await self.choose(evidence_id)
        path = f"/logs/packs/receipt/by-hash/{hashed}"
        body["receipts"] = [{"evidence_id": evidence_id, "log_leaf_hash": hashed, "receipt": path}]
        return httpx.Response(200, json=body)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_each_kept_receipt_has_its_packs_entry_and_verifies_offline(
    backend: Backend, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    files = media_files(tmp_path / "media", 2)
    outbox.enqueue_many(envelopes(files))
    async with (
        edge_server(backend, tmp_path / "server") as app,
        in_process_client(app) as client,
    ):
        report = await outbox.sync(client)
        keys = await client.log_keys()
    assert report.receipts == 2
    for kept, path in zip(outbox.receipts(), files, strict=True):
        row = await store.get_pack(backend.engine, kept.evidence_id)
        assert row is not None and kept.entry == pack_entry(row)
        assert (kept.sent_sha256, kept.sent_size) == (sha256_of(path), path.stat().st_size)
        assert kept.part_index == 0 and kept.device_id == outbox.device.device_id
    # The server is gone: the check needs only the keys and the outbox.
    checks = outbox.check_receipts(keys)
    assert [(check.status, check.detail) for check in checks] == [("verified", "")] * 2
    outbox.close()
    listed = runner.invoke(cli, ["edge", "receipts", "--outbox", str(outbox.path), "--json"])
    assert listed.exit_code == 0, listed.output
    entries = [found["entry"] for found in json.loads(listed.output)["receipts"]]
    assert [entry["sha256"] for entry in entries] == [sha256_of(path) for path in files]


async def test_an_answer_naming_another_devices_leaf_ends_invalid(
    backend: Backend, tmp_path: Path
) -> None:
    """The attack: the upload's answer names another device's valid, logged leaf. Its receipt
    verifies with the log's key; the entry it proves is not of what this device sent."""
    other = Outbox(tmp_path / "other.sqlite3")
    [theirs] = media_files(tmp_path / "theirs", 1, prefix="theirs")
    other.enqueue_many(envelopes([theirs]))
    mine = Outbox(tmp_path / "mine.sqlite3")
    sent = media_files(tmp_path / "mine", 2, prefix="mine")[1]  # other bytes than theirs
    mine.enqueue_many(envelopes([sent]))
    async with edge_server(backend, tmp_path / "server") as app:
        async with in_process_client(app) as client:
            assert (await other.sync(client)).receipts == 1
            keys = await client.log_keys()
        [their_receipt] = other.receipts()

        async def their_leaf(_evidence_id: str) -> str:
            return their_receipt.log_leaf_hash

        hostile = NamingOtherLeaves(httpx.ASGITransport(app=app), their_leaf)
        async with in_process_client(app, transport=hostile) as client:
            report = await mine.sync(client)
    assert len(report.sent) == 1 and report.receipts == 1
    [kept] = mine.receipts()
    assert kept.entry == their_receipt.entry  # the log's own record of the other upload
    [check] = mine.check_receipts(keys)
    assert check.status == "invalid"
    assert f"names sha256 '{sha256_of(theirs)}', the device sent '{sha256_of(sent)}'" in (
        check.detail
    )
    for field in ("evidence_id", "device_sha256", "idempotency_key_sha256"):
        assert f"names {field} " in check.detail
    assert [found.status for found in other.check_receipts(keys)] == ["verified"]
    other.close()
    mine.close()
    environment = {"CONCLAVE_EDGE_OUTBOX": str(mine.path), "CORE_EDGE_API_TOKEN": ""}
    key_file = tmp_path / "keys.json"
    key_file.write_text(keys)
    result = runner.invoke(
        cli, ["edge", "receipts", "--check", "--key", str(key_file)], env=environment
    )
    assert result.exit_code == 1, result.output
    assert "invalid" in result.output and "verified" not in result.output


def misstated(entry: dict[str, Any]) -> dict[str, bytes]:
    """Entries a server may log for an upload instead of its true ``entry``, by what is wrong."""
    size = entry["size_bytes"]
    honest = canonical_json(entry)
    return {
        "not JSON": b"the pack you sent, honestly",
        "not a pack": canonical_json({**entry, "format": "conclave.call/v1"}),
        "NUL": canonical_json({**entry, "filename": "a\x00b.png"}),
        "lone surrogate": canonical_json({**entry, "filename": "\ud800.png"}),
        "NaN": honest.replace(b'"size_bytes":%d' % size, b'"size_bytes":NaN'),
        "huge integer": canonical_json({**entry, "size_bytes": 10**30}),
        "wrong types": canonical_json({**entry, "size_bytes": str(size), "part_index": False}),
        "other bytes": canonical_json({**entry, "sha256": "0" * 64, "size_bytes": size + 1}),
        "other device": canonical_json({**entry, "device_sha256": "d" * 64}),
        "other key": canonical_json({**entry, "idempotency_key_sha256": None}),
    }


EXPECTED = {
    "not JSON": "is not a conclave.pack/v1 entry: ",
    "not a pack": "is not a conclave.pack/v1 entry",
    "NUL": "holds a value no store can carry at 'filename'",
    "lone surrogate": "holds a value no store can carry at 'filename'",
    "NaN": "a fraction, NaN or infinity",
    "huge integer": "an integer of more than 20 digits",
    "wrong types": "names size_bytes '",
    "other bytes": f"names sha256 '{'0' * 64}', the device sent '",
    "other device": f"names device_sha256 '{'d' * 64}', this device's id",
    "other key": "names idempotency_key_sha256 None, the upload's key hashes to '",
}


async def test_a_logged_entry_that_misstates_the_upload_ends_invalid(
    backend: Backend, tmp_path: Path
) -> None:
    """The server logs, and names, an entry of its own making for each upload: the receipts
    all verify with the log's key, and each entry is refused for what is wrong in it."""
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    items = outbox.enqueue_many(envelopes(media_files(tmp_path / "media", len(EXPECTED))))
    cases = iter(EXPECTED)
    async with edge_server(backend, tmp_path / "server") as app:
        log = app.state.tlogs.get_log_or_404("packs")
        named: dict[str, str] = {}

        async def logged_lie(evidence_id: str) -> str:
            row = await store.get_pack(backend.engine, evidence_id)
            assert row is not None
            case = next(cases)
            lie = misstated(json.loads(pack_entry(row)))[case]
            await log.append([lie])
            named[evidence_id] = case
            return leaf_hash(lie).hex()

        hostile = NamingOtherLeaves(httpx.ASGITransport(app=app), logged_lie)
        async with in_process_client(app, transport=hostile) as client:
            report = await outbox.sync(client)
            await outbox.fetch_receipts(client, wait_seconds=8.0)  # any not signed in time
            keys = await client.log_keys()
    assert len(report.sent) == len(items)
    assert not outbox.receipts(missing_only=True)
    checks = outbox.check_receipts(keys)
    assert {check.status for check in checks} == {"invalid"}
    for check in checks:
        expected = EXPECTED[named[check.evidence_id]]
        assert expected in check.detail, (named[check.evidence_id], check.detail)
    wrong_types = next(c for c in checks if named[c.evidence_id] == "wrong types")
    assert "names part_index False, the file's position in its upload is 0" in wrong_types.detail
    outbox.close()
    # Neither the check nor the listing fails on what such a server logged.
    key_file = tmp_path / "keys.json"
    key_file.write_text(keys)
    environment = {"CONCLAVE_EDGE_OUTBOX": str(outbox.path), "CORE_EDGE_API_TOKEN": ""}
    checked = runner.invoke(
        cli, ["edge", "receipts", "--check", "--key", str(key_file)], env=environment
    )
    assert checked.exit_code == 1, checked.output
    listed = runner.invoke(cli, ["edge", "receipts", "--json"], env=environment)
    assert listed.exit_code == 0, listed.output
    shown = {
        found["evidence_id"]: found["entry"] for found in json.loads(listed.output)["receipts"]
    }
    by_case = {named[evidence_id]: entry for evidence_id, entry in shown.items()}
    assert by_case["not JSON"] == "the pack you sent, honestly"
    assert isinstance(by_case["NUL"], str) and '"filename":"a\\u0000b.png"' in by_case["NUL"]
    assert by_case["other device"]["device_sha256"] == "d" * 64


_DROPPED = (
    "part_index",
    "sent_sha256",
    "sent_size",
    "device_id",
    "idempotency_key_sha256",
    "entry",
    "entry_fetched_at",
)


async def test_a_version_2_outbox_opens_and_keeps_working(backend: Backend, tmp_path: Path) -> None:
    """An outbox whose receipts a version-2 client kept: it opens as the current version, its
    receipts stay (``missing``: what they sent was not recorded), and new uploads are proven."""
    path = tmp_path / "outbox.sqlite3"
    outbox = Outbox(path)
    outbox.enqueue_many(envelopes(media_files(tmp_path / "old", 1, prefix="old")))
    async with edge_server(backend, tmp_path / "server") as app:
        async with in_process_client(app) as client:
            await outbox.sync(client)
        [old] = outbox.receipts()
        outbox.close()
        # The file as a version-2 client left it: no columns of version 3.
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
            db.execute("DROP INDEX receipts_unproven")
            for column in _DROPPED:
                db.execute(f"ALTER TABLE receipts DROP COLUMN {column}")
            db.execute("DROP TABLE sent_uploads")
            db.execute("PRAGMA user_version = 2")
        outbox = Outbox(path)
        [reopened] = outbox.receipts()
        assert reopened.receipt == old.receipt and reopened.entry is None
        assert reopened.part_index is None
        [new] = outbox.enqueue_many(envelopes(media_files(tmp_path / "new", 1, prefix="new")))
        async with in_process_client(app) as client:
            report = await outbox.sync(client)
            assert report.sent == [new.id] and report.receipts == 1
            keys = await client.log_keys()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    checks = {check.item_id: check for check in outbox.check_receipts(keys)}
    assert checks[new.id].status == "verified"
    assert checks[old.item_id].status == "missing"
    assert "was not recorded" in checks[old.item_id].detail
    outbox.close()


async def test_with_a_token_the_device_is_checked_as_the_client_is_told(
    backend: Backend, tmp_path: Path
) -> None:
    """With a token the server names the device by its token's user: the client compares it
    when told (``device_id``), and says it did not otherwise."""
    auth = {"auth": "enabled", "api_tokens": "tok-cam1=cam-1"}
    checks = []
    async with edge_server(backend, tmp_path / "server", **auth) as app:
        for told in (None, "cam-1", "cam-2"):
            outbox = Outbox(tmp_path / f"outbox-{told}.sqlite3")
            outbox.enqueue_many(envelopes(media_files(tmp_path / f"media-{told}", 1)))
            async with in_process_client(app, token="tok-cam1", device_id=told) as client:
                assert (await outbox.sync(client)).receipts == 1
                [check] = outbox.check_receipts(await client.log_keys())
            checks.append(check)
            outbox.close()
    untold, told_right, told_wrong = checks
    assert (untold.status, untold.detail) == ("verified", "the device's id was not compared")
    assert (told_right.status, told_right.detail) == ("verified", "")
    assert told_wrong.status == "invalid"
    assert "names device_sha256 " in told_wrong.detail and "'cam-2'" in told_wrong.detail
