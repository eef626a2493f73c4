"""Migration 0012 on a store holding packs chained the old way: those packs, their links and the
chain's head stay exactly as they were and keep verifying; packs uploaded afterwards go into the
log ``packs``, carry no link, and take the next positions."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.edge.chain import GENESIS, link
from conclave.edge.events import evidence_created
from conclave.edge.records import NewEvidencePack
from conclave.edge.store import chain_head, evidence_packs
from conclave.platform.bus.memory import MemoryBus
from conclave.platform.clock import utc_now
from conclave.platform.db.engine import create_engine
from conclave.platform.db.migrate import current_revision, head_revision, migrate
from conclave.platform.outbox import add_event
from tests.conftest import POSTGRES_URL, Backend, eventually, missing_service
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings, form

BEFORE = "0011"


@asynccontextmanager
async def store_before_the_log(kind: str, folder: Path) -> AsyncIterator[AsyncEngine]:
    """A store migrated up to the revision before the log ``packs``."""
    if kind == "sqlite":
        engine = create_engine(f"sqlite+aiosqlite:///{folder / 'conclave.db'}")
        try:
            await migrate(engine, BEFORE)
            yield engine
        finally:
            await engine.dispose()
        return
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL)
    try:
        async with admin.begin() as connection:
            await connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    except Exception as exc:
        await admin.dispose()
        missing_service(f"PostgreSQL not reachable at {POSTGRES_URL}: {type(exc).__name__}")
    engine = create_engine(POSTGRES_URL, schema=schema)
    try:
        await migrate(engine, BEFORE)
        yield engine
    finally:
        await engine.dispose()
        async with admin.begin() as connection:
            await connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await admin.dispose()


async def chain_the_old_way(engine: AsyncEngine, blob_dir: Path, count: int) -> list[str]:
    """Store ``count`` packs as the edge did before the log: each linked to the one before under
    the chain head, with its event, and its blob in the blob store."""
    ids = []
    previous = GENESIS
    for index in range(count):
        content = samples.png(8 + index, 8)
        new = NewEvidencePack(
            evidence_id=str(uuid.uuid4()),
            media_type="image",
            format="PNG",
            mime_type="image/png",
            filename=f"{index}.png",
            sha256=hashlib.sha256(content).hexdigest(),
            size_bytes=len(content),
            client_metadata={"latitude": 1.5},
            extracted={"format": "PNG", "width": 8 + index},
            device_id="old-device",
            correlation_id=None,
            idempotency_key=f"old-{index}",
            part_index=0,
            sampling_policy_ref=None,
            event_id=str(uuid.uuid4()),
            created_at=utc_now(),
        )
        seq = index + 1
        pack = link(new, seq, previous)
        assert pack.chain_hash is not None
        previous = pack.chain_hash
        # The columns of the table before the migration (it added ``log_leaf_hash``, and 0015
        # ``uploaded_by``).
        added = ("log_leaf_hash", "uploaded_by")
        columns = {k: v for k, v in pack.columns().items() if k not in added}
        async with engine.begin() as connection:
            await connection.execute(evidence_packs.insert().values(**columns))
            await add_event(connection, evidence_created(new))
            await connection.execute(
                update(chain_head)
                .where(chain_head.c.id == 1)
                .values(chain_seq=seq, chain_hash=previous, updated_at=utc_now())
            )
        path = blob_dir / "sha256" / new.sha256[:2] / new.sha256[2:4] / new.sha256
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        ids.append(new.evidence_id)
    return ids


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_chained_packs_still_verify_after_the_migration(kind: str, tmp_path: Path) -> None:
    settings = edge_settings(tmp_path)
    async with store_before_the_log(kind, tmp_path) as engine:
        old = await chain_the_old_way(engine, settings.resolved_blob_dir(), 3)
        await migrate(engine)
        assert await current_revision(engine) == head_revision()
        backend = Backend("embedded" if kind == "sqlite" else "production", engine, MemoryBus())
        async with edge_app(backend, settings) as (client, _app):
            chain = (await client.get("/api/edge-intake/chain/verify?content=true")).json()
            assert chain["valid"] and chain["checked"] == 3, chain
            assert chain["head"]["chain_seq"] == 3
            for evidence_id in old:
                verdict = (
                    await client.get(f"/api/edge-intake/evidence/{evidence_id}/verify")
                ).json()
                assert verdict["valid"], verdict
                assert verdict["record"]["ok"] and verdict["log"] is None
                shown = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()
                assert shown["chain_hash"] == verdict["record"]["stored"]
                assert shown["log_leaf_hash"] is None and shown["receipt"] is None

            new = []
            for index in range(2):
                answer = await client.post(
                    "/api/edge-intake/image", **form(("n.png", samples.png(20 + index, 9)))
                )
                assert answer.status_code == 200, answer.text
                new += answer.json()["evidence_ids"]
            positions = [
                (await client.get(f"/api/edge-intake/evidence/{i}")).json()["chain_seq"]
                for i in new
            ]
            assert positions == [4, 5]
            # The last chained pack's next link is not broken by the logged pack after it.
            last = (await client.get(f"/api/edge-intake/evidence/{old[-1]}/verify")).json()
            assert last["valid"] and last["links"]["next_ok"], last
            chain = (await client.get("/api/edge-intake/chain/verify")).json()
            assert chain["valid"] and chain["checked"] == 3, chain

            async def included() -> bool:
                verdict = (await client.get(f"/api/edge-intake/evidence/{new[-1]}/verify")).json()
                return bool(verdict["valid"] and verdict["log"]["state"] == "included")

            await eventually(included)
            events = (await client.get("/api/edge-intake/events")).json()["events"]
            assert [event["evidence_id"] for event in events] == [*reversed(new), *reversed(old)]

        # The migration left the old rows append-only.
        async with engine.connect() as connection:
            with pytest.raises(Exception, match="append-only"):
                await connection.execute(
                    text("DELETE FROM edge_evidence_packs WHERE evidence_id = :i"), {"i": old[0]}
                )
