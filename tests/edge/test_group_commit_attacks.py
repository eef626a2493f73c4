"""Attacks on the edge's uploads joining the platform's group commit (PostgreSQL)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import event, text

from tests.conftest import Backend, eventually
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings, form

INNOCENT = 6


async def test_an_idempotency_race_does_not_make_its_whole_commit_go_one_by_one(
    backend: Backend, tmp_path
) -> None:
    """Two concurrent retries with one Idempotency-Key (a client's ordinary retry, or anyone who
    wants to) make their group commit's single statement fail; the writer then commits every
    upload of that batch alone, one transaction and one fsync each, while the others wait. One
    such pair per batch keeps the edge at one commit per upload: the group commit is gone.

    The committer is held by a table lock while the uploads gather, so that they share a batch."""
    if backend.name != "production":
        pytest.skip("the group commit is PostgreSQL's")
    settings = edge_settings(tmp_path, parser_workers=2, db_committers=1)
    async with edge_app(backend, settings) as (client, app):
        writer = app.state.edge.platform.writer
        retried: list[str] = []

        def count_inserts(*args: Any) -> None:
            statement: str = args[2]
            if statement.startswith("INSERT INTO edge_evidence_packs"):
                retried.append(statement)

        def upload(n: int, key: str | None = None) -> Any:
            content = samples.png(16 + n, 16)
            headers = {"Idempotency-Key": key} if key else {}
            return client.post(
                "/api/edge-intake/image",
                headers=headers,
                **form((f"tile-{n}.png", content), {"device_id": "cam-1"}),
            )

        async with backend.engine.connect() as locker:
            await locker.begin()
            await locker.execute(text("LOCK TABLE edge_evidence_packs IN SHARE ROW EXCLUSIVE MODE"))
            first = asyncio.ensure_future(upload(0))

            async def first_is_waiting() -> bool:
                async with backend.engine.connect() as watcher:
                    query = text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE '%INSERT INTO edge_evidence_packs%'"
                    )
                    return bool((await watcher.execute(query)).scalar_one())

            await eventually(first_is_waiting, timeout=30)
            racing = [asyncio.ensure_future(upload(100 + n, key="retry-1")) for n in range(2)]
            others = [asyncio.ensure_future(upload(1 + n)) for n in range(INNOCENT)]

            async def all_queued() -> bool:
                return writer._queue.qsize() == INNOCENT + 2

            await eventually(all_queued, timeout=60)
            event.listen(backend.engine.sync_engine, "before_cursor_execute", count_inserts)
            await locker.rollback()
        try:
            answers = await asyncio.gather(first, *racing, *others)
        finally:
            event.remove(backend.engine.sync_engine, "before_cursor_execute", count_inserts)

        assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
        race = sorted(answer.json()["status"] for answer in answers[1:3])
        assert race == ["created", "duplicate"]
        assert answers[1].json()["evidence_ids"] == answers[2].json()["evidence_ids"]
        # What the uploads saw was right; what it cost was not: each upload of the batch was
        # inserted by a statement (and committed by a transaction) of its own.
        assert len(retried) < INNOCENT, f"{len(retried)} uploads committed one by one"
