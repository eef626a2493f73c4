"""Evidence Packs are append-only, chained, and tampering is detected."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from conclave.edge.blobs import TempBlob
from tests.conftest import Backend
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


async def test_concurrent_uploads_extend_one_unbroken_chain(backend: Backend, tmp_path) -> None:
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        await _upload_pngs(client, 12)
        report = (await client.get("/api/edge-intake/chain/verify?content=true")).json()
        assert report["valid"], report
        assert report["checked"] == 12
        assert report["head"]["chain_seq"] == 12
        page = (await client.get("/api/edge-intake/chain/verify?after_seq=5&limit=4")).json()
        assert page["valid"] and page["checked"] == 4 and page["next_after_seq"] == 9


async def _drop_immutability(backend: Backend, connection) -> None:
    # The privileged path an attacker with database access would take.
    if backend.name == "embedded":
        await connection.execute(text("DROP TRIGGER edge_evidence_packs_no_update"))
    else:
        await connection.execute(
            text("ALTER TABLE edge_evidence_packs DISABLE TRIGGER edge_evidence_packs_no_change")
        )


async def test_verify_detects_a_modified_blob_and_a_modified_row(
    backend: Backend, tmp_path
) -> None:
    async with edge_app(backend, edge_settings(tmp_path)) as (client, app):
        first, second, third = await _upload_pngs(client, 3)
        for evidence_id in (first, second, third):
            verdict = (await client.get(f"/api/edge-intake/evidence/{evidence_id}/verify")).json()
            assert verdict["valid"], verdict

        pack = (await client.get(f"/api/edge-intake/evidence/{first}")).json()
        blob = app.state.edge.blobs.path_for(pack["sha256"])
        os.chmod(blob, 0o644)
        blob.write_bytes(blob.read_bytes() + b"tampered")
        verdict = (await client.get(f"/api/edge-intake/evidence/{first}/verify")).json()
        assert not verdict["valid"]
        assert verdict["content"]["problem"] == "content_modified"

        async with backend.engine.begin() as connection:
            await _drop_immutability(backend, connection)
            await connection.execute(
                text(
                    "UPDATE edge_evidence_packs SET filename = 'forged.png' WHERE evidence_id = :i"
                ),
                {"i": second},
            )
        verdict = (await client.get(f"/api/edge-intake/evidence/{second}/verify")).json()
        assert not verdict["valid"]
        assert not verdict["record"]["ok"]
        assert verdict["content"]["ok"]
        chain = (await client.get("/api/edge-intake/chain/verify?content=true")).json()
        problems = {(p["evidence_id"], p["problem"]) for p in chain["problems"]}
        assert problems == {(first, "content_modified"), (second, "record_modified")}


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
