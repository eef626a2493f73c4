"""Who reads an Evidence Pack: the user who uploaded it (directly, or through a service acting for
them) and operators. Anyone else is answered as if the pack did not exist, and packs stored
before uploaders were recorded (migration 0015) are for operators only."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import inspect, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.edge.store import evidence_packs
from conclave.platform.auth import ACTING_USER_HEADER
from conclave.platform.bus.memory import MemoryBus
from conclave.platform.clock import utc_now
from conclave.platform.db.engine import create_engine
from conclave.platform.db.migrate import alembic_config, current_revision, head_revision, migrate
from tests.conftest import POSTGRES_URL, Backend, missing_service
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings, form

PEOPLE = {
    "auth": "enabled",
    "api_tokens": "tok-alice=alice,tok-bob=bob,tok-olga=olga,tok-gw=gateway-svc",
    "operators": "olga",
    "service_users": "gateway-svc",
}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
OLGA = {"Authorization": "Bearer tok-olga"}
SERVICE = {"Authorization": "Bearer tok-gw"}
READS = ("", "/content", "/verify")


def acting_for(user: str) -> dict[str, str]:
    return {**SERVICE, ACTING_USER_HEADER: user}


async def _upload(client, headers: dict[str, str], name: str = "a.png") -> str:
    answer = await client.post(
        "/api/edge-intake/image", **form((name, samples.png(12, 7))), headers=headers
    )
    assert answer.status_code == 200, answer.text
    [evidence_id] = answer.json()["evidence_ids"]
    return evidence_id


async def _refusals(client, evidence_id: str, headers: dict[str, str]) -> list[tuple[int, str]]:
    found = []
    for read in READS:
        answer = await client.get(f"/api/edge-intake/evidence/{evidence_id}{read}", headers=headers)
        body = answer.json()
        found.append((answer.status_code, body.get("code", "")))
    return found


async def test_only_the_uploader_and_operators_read_a_pack(backend: Backend, tmp_path) -> None:
    async with edge_app(backend, edge_settings(tmp_path, **PEOPLE)) as (client, _app):
        alices = await _upload(client, ALICE)
        own = (await client.get(f"/api/edge-intake/evidence/{alices}", headers=ALICE)).json()
        assert (own["uploaded_by"], own["device_id"]) == ("alice", "alice")
        content = await client.get(f"/api/edge-intake/evidence/{alices}/content", headers=ALICE)
        assert content.content == samples.png(12, 7)

        # Bob gets exactly what a pack that does not exist gets: an id cannot be probed.
        missing = str(uuid.uuid4())
        not_found = [(404, "EVIDENCE_NOT_FOUND")] * len(READS)
        assert await _refusals(client, alices, BOB) == not_found
        assert await _refusals(client, missing, BOB) == not_found
        bobs_view = await client.get(f"/api/edge-intake/evidence/{alices}", headers=BOB)
        absent = await client.get(f"/api/edge-intake/evidence/{missing}", headers=BOB)
        assert bobs_view.json()["title"] == absent.json()["title"]
        assert set(bobs_view.json()) == set(absent.json())

        for read in READS:
            url = f"/api/edge-intake/evidence/{alices}{read}"
            assert (await client.get(url, headers=OLGA)).status_code == 200, read
            assert (await client.get(url, headers=ALICE)).status_code == 200, read

        # The event list names no one else's pack either.
        events = (await client.get("/api/edge-intake/events", headers=BOB)).json()
        assert events["events"] == []
        everyone = (await client.get("/api/edge-intake/events", headers=OLGA)).json()
        assert [event["evidence_id"] for event in everyone["events"]] == [alices]


async def test_a_service_reads_a_users_packs_only_while_acting_for_that_user(
    backend: Backend, tmp_path
) -> None:
    """The gateway's edge tools call the edge with their service token on behalf of a user."""
    async with edge_app(backend, edge_settings(tmp_path, **PEOPLE)) as (client, _app):
        alices = await _upload(client, ALICE)
        through_service = await _upload(client, acting_for("bob"))
        pack = await client.get(f"/api/edge-intake/evidence/{through_service}", headers=BOB)
        assert pack.json()["uploaded_by"] == "bob"

        for read in READS:
            url = f"/api/edge-intake/evidence/{alices}{read}"
            assert (await client.get(url, headers=acting_for("alice"))).status_code == 200
        not_found = [(404, "EVIDENCE_NOT_FOUND")] * len(READS)
        assert await _refusals(client, alices, acting_for("bob")) == not_found
        # On its own behalf a service is just another user, with no uploads of its own.
        assert await _refusals(client, alices, SERVICE) == not_found
        assert await _refusals(client, alices, {**ALICE, ACTING_USER_HEADER: "bob"}) == [
            (403, "ACTING_USER_FORBIDDEN")
        ] * len(READS)
        # Acting for an operator is acting as one.
        olga = acting_for("olga")
        assert (await client.get(f"/api/edge-intake/evidence/{alices}", headers=olga)).is_success


@asynccontextmanager
async def store_at(revision: str, kind: str, folder: Path) -> AsyncIterator[AsyncEngine]:
    """A store migrated up to ``revision`` (SQLite in ``folder``, or a PostgreSQL schema)."""
    if kind == "sqlite":
        engine = create_engine(f"sqlite+aiosqlite:///{folder / 'conclave.db'}")
        try:
            await migrate(engine, revision)
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
        await migrate(engine, revision)
        yield engine
    finally:
        await engine.dispose()
        async with admin.begin() as connection:
            await connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await admin.dispose()


async def _store_unowned_pack(engine: AsyncEngine, blob_dir: Path, device: str) -> str:
    """A pack as the edge stored it before migration 0015 (no ``uploaded_by`` column yet)."""
    content = samples.png(9, 9)
    digest = hashlib.sha256(content).hexdigest()
    columns = {
        "evidence_id": str(uuid.uuid4()),
        "chain_seq": 1,
        "media_type": "image",
        "format": "PNG",
        "mime_type": "image/png",
        "filename": "before.png",
        "sha256": digest,
        "size_bytes": len(content),
        "client_metadata": {},
        "extracted": {"width": 9},
        "device_id": device,
        "correlation_id": None,
        "idempotency_key": None,
        "part_index": 0,
        "sampling_policy_ref": None,
        "event_id": str(uuid.uuid4()),
        "created_at": utc_now(),
        "prev_chain_hash": None,
        "chain_hash": None,
        "log_leaf_hash": None,
    }
    async with engine.begin() as connection:
        await connection.execute(evidence_packs.insert().values(**columns))
    path = blob_dir / "sha256" / digest[:2] / digest[2:4] / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return str(columns["evidence_id"])


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_packs_stored_before_ownership_are_read_by_operators_only(
    kind: str, tmp_path: Path
) -> None:
    settings = edge_settings(tmp_path, **PEOPLE)
    async with store_at("0014", kind, tmp_path) as engine:
        # Uploaded by alice's device, but nothing recorded that alice uploaded it.
        old = await _store_unowned_pack(engine, settings.resolved_blob_dir(), "alice")
        await migrate(engine)
        assert await current_revision(engine) == head_revision()
        backend = Backend("embedded" if kind == "sqlite" else "production", engine, MemoryBus())
        async with edge_app(backend, settings) as (client, _app):
            url = f"/api/edge-intake/evidence/{old}"
            shown = (await client.get(url, headers=OLGA)).json()
            assert (shown["uploaded_by"], shown["device_id"]) == (None, "alice")
            assert (await client.get(url + "/content", headers=OLGA)).status_code == 200
            assert await _refusals(client, old, ALICE) == [(404, "EVIDENCE_NOT_FOUND")] * 3

            listed = (await client.get("/api/edge-intake/evidence", headers=OLGA)).json()
            assert [pack["evidence_id"] for pack in listed["packs"]] == [old]
            assert listed["packs"][0]["uploaded_by"] is None
            mine = (await client.get("/api/edge-intake/evidence", headers=ALICE)).json()
            assert mine["packs"] == []
            by_device = await client.get(
                "/api/edge-intake/evidence", params={"device_id": "alice"}, headers=ALICE
            )
            assert by_device.json()["packs"] == []


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_the_migration_goes_back_and_keeps_the_table_append_only(
    kind: str, tmp_path: Path
) -> None:
    async with store_at("0015", kind, tmp_path) as engine:
        evidence_id = await _store_unowned_pack(engine, tmp_path / "blobs", "cam")
        await _downgrade(engine, "0014")
        async with engine.connect() as connection:
            columns = await connection.run_sync(
                lambda sync: [c["name"] for c in inspect(sync).get_columns("edge_evidence_packs")]
            )
        assert "uploaded_by" not in columns
        with pytest.raises(DBAPIError, match="append-only"):
            async with engine.begin() as connection:
                await connection.execute(
                    text("UPDATE edge_evidence_packs SET filename = 'x' WHERE evidence_id = :i"),
                    {"i": evidence_id},
                )
        await migrate(engine)
        assert await current_revision(engine) == head_revision()


async def _downgrade(engine: AsyncEngine, revision: str) -> None:
    config = alembic_config()

    def downgrade(connection: Any) -> None:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)

    async with engine.connect() as connection:
        await connection.run_sync(downgrade)
        await connection.commit()
