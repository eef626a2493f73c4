"""Evidence Packs are append-only, each is a leaf of the log ``packs``, and tampering with a
pack's row or its blob is detected by its verification against the log."""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from conclave.edge import store
from conclave.edge.blobs import TempBlob
from conclave.edge.pack_log import pack_entry
from conclave.platform.transparency.hashing import leaf_hash
from tests.conftest import Backend, eventually
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings, form


async def _upload_pngs(client, count: int) -> list[str]:
    async def one(index: int) -> str:
        response = await client.post(
            "/api/edge-intake/image", **form((f"{index}.png", samples.png(8 + index, 8)))
        )
        assert response.status_code == 200, response.text
        return response.json()["evidence_ids"][0]

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def test_packs_refuse_update_and_delete(backend: Backend, tmp_path) -> None:
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        [evidence_id] = await _upload_pngs(client, 1)
    for statement in (
        "UPDATE edge_evidence_packs SET filename = 'x' WHERE evidence_id = :id",
        "DELETE FROM edge_evidence_packs WHERE evidence_id = :id",
    ):
        with pytest.raises(IntegrityError, match="append-only"):
            async with backend.engine.begin() as connection:
                await connection.execute(text(statement), {"id": evidence_id})


async def test_concurrent_uploads_get_distinct_positions_and_leaves(
    backend: Backend, tmp_path
) -> None:
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        ids = await _upload_pngs(client, 12)
        packs = [(await client.get(f"/api/edge-intake/evidence/{i}")).json() for i in ids]
        assert len({pack["chain_seq"] for pack in packs}) == 12
        assert len({pack["log_leaf_hash"] for pack in packs}) == 12
        assert all(pack["chain_hash"] is None for pack in packs)
        # No pack is chained: the chain's walk has nothing to check and its head never moved.
        report = (await client.get("/api/edge-intake/chain/verify?content=true")).json()
        assert report["valid"] and report["checked"] == 0 and report["head"]["chain_seq"] == 0
        listed = (await client.get("/api/edge-intake/events?limit=5")).json()
        page = (await client.get(f"/api/edge-intake/events?cursor={listed['next_cursor']}")).json()
        seen = [event["evidence_id"] for event in listed["events"] + page["events"]]
        assert sorted(seen) == sorted(ids) and len(seen) == 12


async def _drop_immutability(backend: Backend, connection) -> None:
    # The privileged path an attacker with database access would take.
    if backend.name == "embedded":
        await connection.execute(text("DROP TRIGGER edge_evidence_packs_no_update"))
    else:
        await connection.execute(
            text("ALTER TABLE edge_evidence_packs DISABLE TRIGGER edge_evidence_packs_no_change")
        )


async def _verdict(client, evidence_id: str) -> dict:
    async def checked() -> dict | None:
        found = (await client.get(f"/api/edge-intake/evidence/{evidence_id}/verify")).json()
        return found if found["log"]["state"] != "pending" else None

    # The leaf is under a checkpoint within the checkpoint interval (1 s) and a pass.
    verdict: dict = await eventually(checked)
    return verdict


async def test_verify_detects_a_modified_blob_and_a_modified_row(
    backend: Backend, tmp_path
) -> None:
    async with edge_app(backend, edge_settings(tmp_path)) as (client, app):
        first, second, third = await _upload_pngs(client, 3)
        for evidence_id in (first, second, third):
            verdict = await _verdict(client, evidence_id)
            assert verdict["valid"], verdict
            assert verdict["record"] is None and verdict["links"] is None
            logged = verdict["log"]
            assert logged["state"] == "included" and logged["ok"]
            assert logged["entry_ok"] and logged["content_ok"] and logged["included"]
            assert logged["checkpoint_size"] > logged["index"]

        pack = (await client.get(f"/api/edge-intake/evidence/{first}")).json()
        blob = app.state.edge.blobs.path_for(pack["sha256"])
        os.chmod(blob, 0o644)
        blob.write_bytes(blob.read_bytes() + b"tampered")
        verdict = await _verdict(client, first)
        assert not verdict["valid"]
        assert verdict["content"]["problem"] == "content_modified"
        assert not verdict["log"]["content_ok"]
        assert verdict["log"]["entry_ok"] and verdict["log"]["included"]

        async with backend.engine.begin() as connection:
            await _drop_immutability(backend, connection)
            await connection.execute(
                text(
                    "UPDATE edge_evidence_packs SET filename = 'forged.png' WHERE evidence_id = :i"
                ),
                {"i": second},
            )
        verdict = await _verdict(client, second)
        assert not verdict["valid"]
        assert verdict["content"]["ok"]
        assert verdict["log"]["state"] == "included"
        assert not verdict["log"]["entry_ok"]
        assert verdict["log"]["content_ok"] and verdict["log"]["included"]
        assert (await _verdict(client, third))["valid"]


@pytest.mark.parametrize(
    "moved", [timedelta(minutes=-5), timedelta(days=365)], ids=["back-dated", "future-dated"]
)
async def test_a_row_rewritten_with_a_leaf_hash_of_its_own_is_found_missing_from_the_log(
    backend: Backend, tmp_path, moved: timedelta
) -> None:
    """A forger who edits a pack's row and records the leaf hash of the edited entry (so the row
    agrees with itself) cannot put that leaf into the signed log: once the pack is older than a
    leaf takes to be signed, its verification reports the leaf not found. A row dated in the
    future (where "not yet signed" would last until that date) is no record's either."""
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        [evidence_id] = await _upload_pngs(client, 1)
        assert (await _verdict(client, evidence_id))["valid"]
        row = await store.get_pack(backend.engine, evidence_id)
        assert row is not None
        earlier = row.created_at + moved
        forged = replace(row, filename="forged.png", created_at=earlier)
        async with backend.engine.begin() as connection:
            await _drop_immutability(backend, connection)
            await connection.execute(
                text(
                    "UPDATE edge_evidence_packs SET filename = :f, created_at = :c,"
                    " log_leaf_hash = :h WHERE evidence_id = :i"
                ),
                {
                    "f": forged.filename,
                    "c": earlier,
                    "h": leaf_hash(pack_entry(forged)),
                    "i": evidence_id,
                },
            )
        verdict = (await client.get(f"/api/edge-intake/evidence/{evidence_id}/verify")).json()
        assert not verdict["valid"]
        assert verdict["log"]["state"] == "not_found" and verdict["log"]["entry_ok"], verdict


async def test_unknown_evidence_is_404(backend: Backend, tmp_path) -> None:
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        for suffix in ("", "/content", "/verify"):
            response = await client.get(f"/api/edge-intake/evidence/nope{suffix}")
            assert response.status_code == 404
            assert response.json()["code"] == "EVIDENCE_NOT_FOUND"


def test_a_part_written_back_as_it_arrives_is_stored_whole(tmp_path) -> None:
    """With fsync on, each 32 MiB of a part is handed to the kernel's write-back as it arrives;
    the file must still hold every byte, in order."""
    chunk = bytes(range(256)) * 4096  # 1 MiB
    blob = TempBlob(tmp_path / "part", 100 * 1024**2, write_back=True)
    expected = hashlib.sha256()
    for index in range(70):
        data = bytes([index]) + chunk[1:]
        blob.write(data)
        expected.update(data)
    blob.close()
    assert blob.size == 70 * 1024**2
    with (tmp_path / "part").open("rb") as stream:
        assert hashlib.file_digest(stream, "sha256").hexdigest() == expected.hexdigest()
    assert blob.sha256 == expected.hexdigest()


async def test_a_pack_row_written_by_hand_without_a_leaf_is_not_valid(
    backend: Backend, tmp_path
) -> None:
    """An INSERT (no trigger refuses one) of a pack neither chained nor logged: its bytes may be
    intact, but nothing shows the edge accepted it, so it does not verify."""
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        [evidence_id] = await _upload_pngs(client, 1)
        row = await store.get_pack(backend.engine, evidence_id)
        assert row is not None
        made_up = replace(row, evidence_id="00000000-0000-4000-8000-00000000cafe")
        values = {**made_up.columns(), "log_leaf_hash": None, "chain_seq": row.chain_seq + 1000}
        values["event_id"] = "00000000-0000-4000-8000-00000000cafe"
        async with backend.engine.begin() as connection:
            await connection.execute(store.evidence_packs.insert(), [values])
        verdict = await _verdict(client, made_up.evidence_id)
        assert verdict["content"]["ok"] and not verdict["valid"]
        assert verdict["log"]["state"] == "not_logged"
