"""`conclave outbox list|replay|discard` on the configured store (SQLite or PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from sqlalchemy import select, text
from typer.testing import CliRunner, Result

from conclave.cli.main import app
from conclave.platform.bus.base import Event
from conclave.platform.db.schema import outbox_events
from conclave.platform.outbox import OutboxRelay, add_event
from tests.conftest import Backend

runner = CliRunner()
CHANNEL = "orders.placed"


async def store_environment(backend: Backend) -> dict[str, str]:
    """The variables that point the CLI at the backend's store."""
    if backend.name == "embedded":
        return {"CONCLAVE_DATABASE_URL": f"sqlite+aiosqlite:///{backend.engine.url.database}"}
    async with backend.engine.connect() as connection:
        schema = await connection.scalar(text("SELECT current_schema()"))
    url = backend.engine.url.render_as_string(hide_password=False)
    return {"CONCLAVE_DATABASE_URL": url, "CONCLAVE_DATABASE_SCHEMA": str(schema)}


async def outbox(backend: Backend, *args: str) -> Result:
    # The CLI runs its own event loop: give it a thread.
    env = await store_environment(backend)
    return await asyncio.to_thread(runner.invoke, app, ["outbox", *args], env=env)


async def row(backend: Backend, event_id: str) -> Any:
    async with backend.engine.connect() as connection:
        query = select(outbox_events).where(outbox_events.c.event_id == event_id)
        return (await connection.execute(query)).one_or_none()


async def test_list_replay_and_discard_quarantined_events(backend: Backend) -> None:
    first, second = (
        Event(channel=CHANNEL, payload={"n": n, "message": "\ud800"}, source="test") for n in (1, 2)
    )
    async with backend.engine.begin() as connection:
        for item in (first, second):
            await add_event(connection, item)
    relay = OutboxRelay(backend.engine, backend.bus)
    await relay.publish_pending()

    listed = await outbox(backend, "list")
    assert listed.exit_code == 0, listed.output
    assert first.event_id in listed.output and second.event_id in listed.output
    assert "not encodable as UTF-8" in listed.output
    as_json = await outbox(backend, "list", "--json")
    events = {item["event_id"]: item for item in json.loads(as_json.output)["events"]}
    assert set(events) == {first.event_id, second.event_id}
    shown = events[first.event_id]
    assert (shown["channel"], shown["attempts"]) == (CHANNEL, 1)
    assert shown["payload"] == {"n": 1, "message": "\ud800"}
    assert shown["created_at"].endswith("Z") and shown["quarantined_at"].endswith("Z")

    # Replayed as it is, the event is refused again and goes back to quarantine.
    replayed = await outbox(backend, "replay", first.event_id)
    assert replayed.exit_code == 0, replayed.output
    assert "replayed 1 event" in replayed.output
    assert (await row(backend, first.event_id)).quarantined_at is None
    assert await relay.publish_pending() == 1
    again = await row(backend, first.event_id)
    assert again.quarantined_at is not None and again.attempts == 1

    # Replayed with its unencodable text escaped, it is delivered.
    fixed = await outbox(backend, "replay", "--escape", first.event_id)
    assert fixed.exit_code == 0, fixed.output
    assert await relay.publish_pending() == 1
    [published] = await backend.bus.read(CHANNEL)
    assert published.event_id == first.event_id
    assert published.payload == {"n": 1, "message": "\\ud800"}

    discarded = await outbox(backend, "discard", second.event_id)
    assert discarded.exit_code == 0, discarded.output
    assert await row(backend, second.event_id) is None
    assert json.loads((await outbox(backend, "list", "--json")).output) == {"events": []}
    assert "no quarantined events" in (await outbox(backend, "list")).output

    gone = await outbox(backend, "discard", second.event_id)
    assert gone.exit_code == 1
    assert "not quarantined" in gone.output
    assert (await outbox(backend, "replay")).exit_code == 2  # ids or --all


async def test_replay_all_puts_every_quarantined_event_back(backend: Backend) -> None:
    events = [
        Event(channel=CHANNEL, payload={"n": n, "message": "\ud800"}, source="test")
        for n in range(3)
    ]
    async with backend.engine.begin() as connection:
        for item in events:
            await add_event(connection, item)
    relay = OutboxRelay(backend.engine, backend.bus)
    await relay.publish_pending()
    result = await outbox(backend, "replay", "--all", "--escape")
    assert result.exit_code == 0, result.output
    assert "replayed 3 events" in result.output
    assert await relay.publish_pending() == 3
    assert sorted(e.payload["n"] for e in await backend.bus.read(CHANNEL)) == [0, 1, 2]
    assert "discarded 0 events" in (await outbox(backend, "discard", "--all")).output
