"""The store going down: uploads are refused with 503, nothing is half-written, and the service
recovers by itself once the store is back."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from sqlalchemy import func, select

from conclave.edge.store import evidence_packs
from conclave.platform.db.schema import outbox_events, tlog_leaves, tlog_queue
from tests.conftest import POSTGRES_URL, Backend, eventually, isolated_postgres
from tests.edge import samples
from tests.edge.conftest import CHANNEL, edge_app, edge_settings, form
from tests.netproxy import CuttableProxy


async def _written(backend: Backend) -> tuple[int, int, int]:
    """Packs, events and leaves of the log ``packs`` (queued or sequenced) in the store."""
    async with backend.engine.connect() as connection:
        packs = await connection.scalar(select(func.count()).select_from(evidence_packs))
        events = await connection.scalar(select(func.count()).select_from(outbox_events))
        queued = await connection.scalar(select(func.count()).select_from(tlog_queue))
        logged = await connection.scalar(select(func.count()).select_from(tlog_leaves))
    return packs or 0, events or 0, (queued or 0) + (logged or 0)


async def test_store_down_refuses_uploads_with_503_and_writes_nothing(
    redis_bus, redis_client, redis_prefix, tmp_path: Path
) -> None:
    parsed = urlparse(POSTGRES_URL.replace("+asyncpg", ""))
    proxy = CuttableProxy(parsed.hostname or "127.0.0.1", parsed.port or 5432)
    await proxy.start()
    proxied = POSTGRES_URL.replace(parsed.netloc, f"{parsed.username}@127.0.0.1:{proxy.port}")
    photo = samples.jpeg_with_gps()
    try:
        async with isolated_postgres(proxied) as engine:
            backend = Backend("production", engine, redis_bus)
            settings = edge_settings(tmp_path)
            async with edge_app(backend, settings) as (client, app):
                await proxy.cut()
                response = await client.post(
                    "/api/edge-intake/image",
                    **form([("a.jpg", photo), ("b.png", samples.png())], {"latitude": 1.0}),
                )
                assert response.status_code == 503, response.text
                assert response.json()["code"] == "STORE_UNAVAILABLE"
                health = await client.get("/health")
                assert health.status_code == 503
                assert health.json()["reldb"] == "disconnected"

                await proxy.restore()  # recovers without a restart
                assert await _written(backend) == (0, 0, 0)  # no pack, no event, no leaf
                blobs = app.state.edge.blobs
                assert not list(blobs.root.glob("tmp/*.part"))  # temporary files deleted

                response = await client.post("/api/edge-intake/image", **form(("a.jpg", photo)))
                assert response.status_code == 200, response.text
                [evidence_id] = response.json()["evidence_ids"]
                assert await _written(backend) == (1, 1, 1)
                stored = await client.get(f"/api/edge-intake/evidence/{evidence_id}/content")
                assert stored.content == photo

                async def proven() -> bool:
                    # Valid once the checkpoint covering the pack is signed (about a second).
                    path = f"/api/edge-intake/evidence/{evidence_id}/verify"
                    return bool((await client.get(path)).json()["valid"])

                await eventually(proven)
                assert (await client.get("/health")).json()["reldb"] == "connected"

                async def published() -> list:
                    return await redis_client.xrange(redis_prefix + CHANNEL)

                [(_, fields)] = await eventually(published)
                assert evidence_id in fields["payload"]
    finally:
        await proxy.close()


async def test_a_commit_whose_answer_was_lost_creates_the_pack_once(
    redis_bus, tmp_path: Path
) -> None:
    """The network fails after PostgreSQL committed an upload's pack and before the edge heard
    so: the retry meets the upload's own rows, and the upload is answered `created` with its
    pack, stored once (it used to answer 500)."""
    parsed = urlparse(POSTGRES_URL.replace("+asyncpg", ""))
    proxy = CuttableProxy(parsed.hostname or "127.0.0.1", parsed.port or 5432)
    await proxy.start()
    proxied = POSTGRES_URL.replace(parsed.netloc, f"{parsed.username}@127.0.0.1:{proxy.port}")
    try:
        async with isolated_postgres(proxied) as engine:
            backend = Backend("production", engine, redis_bus)
            async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
                warm = await client.post(
                    "/api/edge-intake/image", **form(("warm.png", samples.png()))
                )
                assert warm.status_code == 200, warm.text
                # The pack's group commit carries its file name: its answer is lost.
                proxy.lose_reply_to(b"lost-ack-probe.png")
                response = await client.post(
                    "/api/edge-intake/image", **form(("lost-ack-probe.png", samples.png(33, 17)))
                )
                assert proxy.lost_replies == 1
                assert response.status_code == 200, response.text
                body = response.json()
                assert body["status"] == "created"
                [evidence_id] = body["evidence_ids"]
                async with engine.connect() as connection:
                    stored = (
                        (
                            await connection.execute(
                                select(evidence_packs.c.evidence_id).where(
                                    evidence_packs.c.filename == "lost-ack-probe.png"
                                )
                            )
                        )
                        .scalars()
                        .all()
                    )
                assert stored == [evidence_id]
                assert await _written(backend) == (2, 2, 2)  # packs, events, leaves: once each
    finally:
        await proxy.close()
