"""The edge's log of Evidence Packs: every new pack is a leaf (``conclave.pack/v1``) queued with
the pack's rows, its upload answer links to its receipt, the receipt resolves about a second later
and verifies offline against the entry rebuilt from the stored row, the leaf holds hashes of what
a reader must not see, and a device's idempotency key holds without any lock."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from conclave.edge import service as service_module
from conclave.edge import store
from conclave.edge.events import evidence_created
from conclave.edge.pack_log import pack_entry
from conclave.edge.records import EvidencePack, NewEvidencePack
from conclave.edge_client.receipts import check_receipt
from conclave.edge_client.receipts import verifier_keys as verifier_keys_of
from conclave.platform.bus.memory import MemoryBus
from conclave.platform.clock import utc_now
from conclave.platform.db.engine import create_engine
from conclave.platform.tlog import audit_log
from conclave.platform.tlog.entries import canonical_json, json_sha256, text_sha256
from tests.conftest import POSTGRES_URL, Backend, eventually, isolated_postgres
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings, form

METADATA = {"latitude": 45.1, "longitude": 7.2, "device_id": "field-unit-7", "note": "secret-x"}


async def receipt_of(client: httpx.AsyncClient, path: str) -> bytes:
    async def resolved() -> bytes | None:
        answer = await client.get(path)
        if answer.status_code == 200:
            return answer.content
        # Until the checkpoint covering the leaf is signed (1 s interval): what a client polls.
        assert answer.json()["code"] in ("LEAF_NOT_FOUND", "BEYOND_LOG"), answer.text
        return None

    found: bytes = await eventually(resolved, timeout=60)
    return found


async def keys(client: httpx.AsyncClient) -> list[str]:
    return [key["vkey"] for key in (await client.get("/logs/packs/keys")).json()["keys"]]


async def stored(backend: Backend, evidence_id: str) -> EvidencePack:
    row = await store.get_pack(backend.engine, evidence_id)
    assert row is not None
    return row


async def test_an_upload_links_each_pack_to_a_receipt_of_its_stored_facts(
    backend: Backend, tmp_path: Path
) -> None:
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        answer = await client.post(
            "/api/edge-intake/image",
            **form(
                [("a.png", samples.png()), ("b.jpg", samples.jpeg_with_gps())],
                METADATA,
                correlation_id="corr-secret-1",
                idempotency_key="key-secret-1",
            ),
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert [r["evidence_id"] for r in body["receipts"]] == body["evidence_ids"]
        verifier_keys = await keys(client)
        indices = []
        for receipt_link in body["receipts"]:
            hashed = receipt_link["log_leaf_hash"]
            assert receipt_link["receipt"] == f"/logs/packs/receipt/by-hash/{hashed}"
            evidence_id = receipt_link["evidence_id"]
            shown = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()
            assert (shown["log_leaf_hash"], shown["receipt"]) == (hashed, receipt_link["receipt"])
            assert shown["prev_chain_hash"] is None and shown["chain_hash"] is None

            row = await stored(backend, evidence_id)
            assert row.log_leaf_hash == bytes.fromhex(hashed)
            entry = pack_entry(row)  # rebuilt from the stored row
            assert hashlib.sha256(b"\x00" + entry).hexdigest() == hashed
            receipt = await receipt_of(client, receipt_link["receipt"])
            opened = check_receipt(receipt, verifier_keys, entry)
            index: int = json.loads(receipt)["index"]
            assert opened.checkpoint.size > index
            indices.append(index)
            leaf = (await client.get(f"/logs/packs/leaves/{index}")).json()
            data = base64.b64decode(leaf["data"])
            assert data == entry

            facts = json.loads(entry)
            assert entry == canonical_json(facts) and entry.isascii()
            assert facts["format"] == "conclave.pack/v1"
            assert facts["evidence_id"] == evidence_id and facts["event_id"] == row.event_id
            assert (facts["sha256"], facts["size_bytes"]) == (row.sha256, row.size_bytes)
            assert facts["file_format"] == row.format and facts["part_index"] == row.part_index
            assert facts["metadata_sha256"] == json_sha256(row.client_metadata)
            assert facts["extracted_sha256"] == json_sha256(row.extracted)
            assert facts["device_sha256"] == text_sha256("field-unit-7")
            assert facts["correlation_id_sha256"] == text_sha256("corr-secret-1")
            assert facts["idempotency_key_sha256"] == text_sha256("key-secret-1")
            # Hashes only: no metadata value, device, correlation id or key in the leaf.
            for secret in (b"secret-x", b"45.1", b"field-unit-7", b"corr-secret", b"key-secret"):
                assert secret not in data
        assert sorted(indices) == [0, 1]


async def test_a_duplicate_upload_answers_the_first_uploads_receipts(
    backend: Backend, tmp_path: Path
) -> None:
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        request = form(("a.png", samples.png()))
        headers = {"Idempotency-Key": "once"}
        first = (await client.post("/api/edge-intake/image", **request, headers=headers)).json()
        again = (await client.post("/api/edge-intake/image", **request, headers=headers)).json()
        assert again["status"] == "duplicate"
        assert again["receipts"] == first["receipts"] and len(first["receipts"]) == 1


async def test_with_auth_off_one_key_of_two_devices_is_two_uploads(
    backend: Backend, tmp_path: Path
) -> None:
    """With auth off the device is named in the body: a key already used by another device (or
    by an upload naming none) must not answer this device's upload with that one's packs."""
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        headers = {"Idempotency-Key": "k1"}
        route = "/api/edge-intake/image"
        first = (await client.post(route, **form(("a.png", samples.png())), headers=headers)).json()
        mine = form(("b.png", samples.png(65, 33)), {"device_id": "phone-y"})
        second = await client.post(route, **mine, headers=headers)
        assert second.status_code == 200, second.text
        assert second.json()["status"] == "created"
        assert second.json()["evidence_ids"] != first["evidence_ids"]


class _WithoutTheEarlyCheck:
    """The edge's store as the service sees it, but with the early idempotency check (before the
    body is read) finding nothing: every upload of the key then reaches the insert, as uploads
    racing each other do."""

    def __getattr__(self, name: str) -> Any:
        return getattr(store, name)

    async def idempotent_packs(self, *_args: Any) -> list[Any]:
        return []


async def test_concurrent_uploads_of_one_key_store_one_upload(
    backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uploads of one key that all passed the early check: the unique index on device, key and
    part lets one commit, and the others answer its packs (the lost race, no lock)."""
    monkeypatch.setattr(service_module, "store", _WithoutTheEarlyCheck())
    async with edge_app(backend, edge_settings(tmp_path, parser_workers=2)) as (client, _app):
        answers = await asyncio.gather(
            *(
                client.post(
                    "/api/edge-intake/image",
                    **form([("a.png", samples.png(8 + n, 8)), ("b.png", samples.png())]),
                    headers={"Idempotency-Key": "raced"},
                )
                for n in range(6)
            )
        )
        bodies = [answer.json() for answer in answers]
        assert all(answer.status_code == 200 for answer in answers), bodies
        assert [body["status"] for body in bodies].count("created") == 1
        assert len({tuple(body["evidence_ids"]) for body in bodies}) == 1
        assert len({json.dumps(body["receipts"]) for body in bodies}) == 1
        async with backend.engine.connect() as connection:
            packs = await connection.scalar(text("SELECT count(*) FROM edge_evidence_packs"))
            leaves = await connection.scalar(
                text(
                    "SELECT (SELECT count(*) FROM tlog_queue) + (SELECT count(*) FROM tlog_leaves)"
                )
            )
        assert (packs, leaves) == (2, 2)
        for receipt_link in bodies[0]["receipts"]:
            row = await stored(backend, receipt_link["evidence_id"])
            receipt = await receipt_of(client, receipt_link["receipt"])
            check_receipt(receipt, await keys(client), pack_entry(row))


def _pack(key: str, part: int) -> NewEvidencePack:
    return NewEvidencePack(
        evidence_id=f"00000000-0000-4000-8000-{part:012d}",
        media_type="image",
        format="PNG",
        mime_type="image/png",
        filename="a.png",
        sha256="ab" * 32,
        size_bytes=1,
        client_metadata={},
        extracted={},
        device_id="dev",
        correlation_id=None,
        idempotency_key=key,
        part_index=part,
        sampling_policy_ref=None,
        event_id=f"00000000-0000-4000-9000-{part:012d}",
        created_at=utc_now(),
    )


async def test_a_taken_key_in_the_store_answers_the_earlier_packs(backend: Backend) -> None:
    """The lost race itself, at the store: the second insert of a device's key (after the first
    committed) is refused by the unique index and answered with the first upload's packs."""
    first = [_pack("k", 0), _pack("k", 1)]
    created = await store.append_packs(
        backend.engine,
        first,
        [evidence_created(p) for p in first],
        [],
        device_id="dev",
        idempotency_key="k",
    )
    assert created is None
    late = _pack("k", 0)
    late = NewEvidencePack(
        **{**late.columns(), "evidence_id": "00000000-0000-4000-8000-00000000ffff"}
    )
    earlier = await store.append_packs(
        backend.engine, [late], [], [], device_id="dev", idempotency_key="k"
    )
    assert earlier is not None
    assert [pack.evidence_id for pack in earlier] == [p.evidence_id for p in first]
    assert await store.get_pack(backend.engine, late.evidence_id) is None


async def test_without_the_log_packs_carry_no_receipt(backend: Backend, tmp_path: Path) -> None:
    async with edge_app(backend, edge_settings(tmp_path, pack_log=False)) as (client, _app):
        answer = (
            await client.post("/api/edge-intake/image", **form(("a.png", samples.png())))
        ).json()
        assert answer["receipts"] == []
        [evidence_id] = answer["evidence_ids"]
        shown = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()
        assert shown["log_leaf_hash"] is None and shown["receipt"] is None
        verdict = (await client.get(f"/api/edge-intake/evidence/{evidence_id}/verify")).json()
        # Stored bytes intact, but nothing (no chain, no log) proves the pack was accepted so.
        assert verdict["content"]["ok"] is True
        assert not verdict["valid"] and verdict["log"]["state"] == "not_logged"
        assert (await client.get("/logs/packs/checkpoint")).json()["code"] == "LOG_NOT_FOUND"


async def test_two_edge_replicas_on_one_postgresql_make_one_log(tmp_path: Path) -> None:
    async with isolated_postgres() as engine:
        async with engine.connect() as connection:
            schema = await connection.scalar(text("SELECT current_schema()"))
        other = create_engine(POSTGRES_URL, schema=schema)
        try:
            replicas = [
                Backend("production", engine, MemoryBus()),
                Backend("production", other, MemoryBus()),
            ]
            # One data folder: in this test the log's key is the generated one, shared like a
            # configured key would be.
            settings = edge_settings(tmp_path, parser_workers=2)
            async with (
                edge_app(replicas[0], settings) as (first, _),
                edge_app(replicas[1], settings) as (second, _),
            ):

                async def upload(client: httpx.AsyncClient, n: int) -> Any:
                    answer = await client.post(
                        "/api/edge-intake/image", **form((f"{n}.png", samples.png(8 + n, 8)))
                    )
                    assert answer.status_code == 200, answer.text
                    return answer.json()

                bodies = await asyncio.gather(
                    *(upload(client, n) for n in range(8) for client in (first, second))
                )
                verifier_keys = await keys(first)
                assert verifier_keys == await keys(second)
                indices = []
                for n, body in enumerate(bodies):
                    [link] = body["receipts"]
                    row = await store.get_pack(engine, link["evidence_id"])
                    assert row is not None
                    # Either replica serves any pack's receipt: one log.
                    client = (first, second)[n % 2]
                    receipt = await receipt_of(client, link["receipt"])
                    check_receipt(receipt, verifier_keys, pack_entry(row))
                    indices.append(json.loads(receipt)["index"])
                assert sorted(indices) == list(range(16))
            # Read back whole, the log is what its signed checkpoints say.
            audit = await audit_log(engine, "packs", verifier_keys_of(verifier_keys))
            assert audit.ok and audit.sequenced_size == 16, audit.findings
        finally:
            await other.dispose()


async def test_a_packs_leaf_data_is_for_operators_and_the_device_that_uploaded_it(
    backend: Backend, tmp_path: Path
) -> None:
    settings = edge_settings(
        tmp_path,
        auth="enabled",
        api_tokens="tok-a=cam-a,tok-b=cam-b,tok-op=ops",
        operators="ops",
    )
    async with edge_app(backend, settings) as (client, _app):
        answer = await client.post(
            "/api/edge-intake/image",
            **form(("a.png", samples.png())),
            headers={"Authorization": "Bearer tok-a"},
        )
        assert answer.status_code == 200, answer.text
        [link] = answer.json()["receipts"]
        index = json.loads(await receipt_of(client, link["receipt"]))["index"]
        path = f"/logs/packs/leaves/{index}"
        for token, status in (("tok-a", 200), ("tok-op", 200), ("tok-b", 403)):
            read = await client.get(path, headers={"Authorization": f"Bearer {token}"})
            assert read.status_code == status, (token, read.text)
        assert (await client.get(path)).status_code == 401
        data = base64.b64decode(
            (await client.get(path, headers={"Authorization": "Bearer tok-a"})).json()["data"]
        )
        row = await stored(backend, link["evidence_id"])
        assert data == pack_entry(row) and json.loads(data)["device_sha256"] == text_sha256("cam-a")
