"""The recipe "add a bus consumer" (CONTRIBUTING.md), followed once by a demo service.

The demo service consumes ``demo.greeting.sent``: each greeting becomes a row of its store. Each
section below is the file of a service package the recipe names; the tests run the service on
both backends (SQLite + the in-process bus, PostgreSQL + Redis Streams) and check what the recipe
promises: an event is handled once however often it is delivered, a bad event is dead-lettered
without holding up the next one, and stopping the service leaves nothing running.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import Column, Integer, MetaData, String, Table, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from conclave.platform.bus.base import Event, EventBus, dead_letter_channel
from conclave.platform.consumed_store import mark_consumed
from conclave.platform.db.engine import store_errors
from conclave.platform.http import create_service_app
from conclave.platform.listener import ConsumerMetrics, Listener, rejecting
from conclave.platform.metrics import ServiceMetrics
from tests.conftest import Backend, eventually, serve_app, test_settings

# --- events.py (of the producing service): its channels, and their payloads' documentation.
GREETING_SENT = "demo.greeting.sent"

# --- events.py (of the consuming service): the groups it reads through.
GREETINGS_GROUP = "demo-greetings"

# --- store.py: all SQL of the service (the demo's table is created by the test, not migrated).
demo_metadata = MetaData()
greetings = Table(
    "demo_greetings",
    demo_metadata,
    Column("greeting_id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(100), nullable=False),
)


async def add_greeting(connection: AsyncConnection, name: str) -> None:
    await connection.execute(greetings.insert().values(name=name))


async def greeting_names(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as connection:
        rows = await connection.execute(select(greetings.c.name).order_by(greetings.c.name))
        return list(rows.scalars())


# --- models.py: the payload, validated like a request body.
class GreetingSent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)


# --- service.py: the use case owns the transaction; the mark commits with the row.
class GreetingService:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def greet(self, name: str, *, dedupe: tuple[str, str] | None = None) -> None:
        """Store a greeting; with ``dedupe=(consumer group, event id)``, once per event."""
        with store_errors():
            async with self.engine.begin() as connection:
                if dedupe is not None and not await mark_consumed(connection, *dedupe):
                    return  # a redelivery: the row is already there
                await add_greeting(connection, name)


# --- metrics.py: the consumer counters on the service's registry.
class DemoMetrics(ServiceMetrics):
    def __init__(self) -> None:
        super().__init__("demo")
        self.consumed = ConsumerMetrics(self)


# --- listeners.py: the subscriptions, and handlers that turn an event into a use case call.
class GreetingListeners:
    def __init__(
        self, service: GreetingService, bus: EventBus, metrics: DemoMetrics, consumer: str
    ) -> None:
        self._service = service
        self.listener = Listener(bus, consumer, metrics.consumed)
        self.listener.subscribe(GREETING_SENT, GREETINGS_GROUP, self.on_greeting_sent, start="0")

    async def start(self) -> None:
        await self.listener.start()

    async def stop(self) -> None:
        await self.listener.stop()

    async def on_greeting_sent(self, event: Event) -> None:
        """``demo.greeting.sent`` → one greeting."""
        with rejecting(ValidationError):
            greeting = GreetingSent.model_validate(event.payload)
        await self._service.greet(greeting.name, dedupe=(GREETINGS_GROUP, event.event_id))


# --- app.py: the listeners start in the lifespan and stop with it.
def create_app(
    engine: AsyncEngine, bus: EventBus, metrics: DemoMetrics, service: GreetingService
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            listeners = GreetingListeners(service, bus, metrics, consumer="demo-1")
            await listeners.start()
            stack.push_async_callback(listeners.stop)
            app.state.listeners = listeners
            yield

    return create_service_app(
        service="demo",
        title="Demo",
        version="0",
        description="Consumes greetings.",
        settings=test_settings(),
        metrics=metrics,
        lifespan=lifespan,
    )


# --- the tests of the recipe.


class AckLosingService(GreetingService):
    """Commits the first greeting, then fails before the bus hears of it (a process that died
    between its commit and the acknowledgement): the bus delivers that event again."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self.lost: list[str] = []

    async def greet(self, name: str, *, dedupe: tuple[str, str] | None = None) -> None:
        await super().greet(name, dedupe=dedupe)
        if not self.lost:
            self.lost.append(name)
            raise RuntimeError("the acknowledgement was lost")


async def create_demo_table(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        await connection.run_sync(demo_metadata.create_all)


def greeting(name: str) -> Event:
    return Event(channel=GREETING_SENT, payload={"name": name}, source="test")


def consumed(metrics_text: str, outcome: str) -> float:
    pattern = (
        rf'^conclave_demo_events_consumed_total\{{channel="{re.escape(GREETING_SENT)}",'
        rf'outcome="{outcome}"\}} (\S+)$'
    )
    found = re.search(pattern, metrics_text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def metrics_text(client: httpx.AsyncClient) -> str:
    return (await client.get("/metrics")).text


async def test_an_event_is_handled_once_however_often_it_is_delivered(backend: Backend) -> None:
    await create_demo_table(backend.engine)
    service = AckLosingService(backend.engine)
    app = create_app(backend.engine, backend.bus, DemoMetrics(), service)
    ada, bob = greeting("Ada"), greeting("Bob")
    async with serve_app(app) as client:
        # The outbox relay publishes again what it could not mark published: a second copy.
        await backend.bus.publish([ada, ada, bob])

        async def all_handled() -> bool:
            text = await metrics_text(client)
            return consumed(text, "handled") == 3 and consumed(text, "failed") == 1

        await eventually(all_handled, timeout=60)
    assert service.lost == ["Ada"]
    assert await greeting_names(backend.engine) == ["Ada", "Bob"]


async def test_a_bad_event_is_dead_lettered_without_holding_up_the_next(backend: Backend) -> None:
    await create_demo_table(backend.engine)
    metrics = DemoMetrics()
    app = create_app(backend.engine, backend.bus, metrics, GreetingService(backend.engine))
    nameless = Event(channel=GREETING_SENT, payload={"name": ""}, source="test")
    ada = greeting("Ada")
    async with serve_app(app) as client:
        await backend.bus.publish([nameless, ada])

        async def ada_stored() -> bool:
            return await greeting_names(backend.engine) == ["Ada"]

        await eventually(ada_stored)
        dead = await eventually(lambda: backend.bus.read(dead_letter_channel(GREETING_SENT)))
        await asyncio.sleep(1.5)  # past the fixtures' reclaim idle time: not delivered again
        text = await metrics_text(client)
    assert [event.event_id for event in dead] == [nameless.event_id]
    assert (consumed(text, "rejected"), consumed(text, "handled")) == (1, 1)


async def test_stopping_leaves_nothing_running_and_loses_nothing(backend: Backend) -> None:
    await create_demo_table(backend.engine)
    service = GreetingService(backend.engine)
    app = create_app(backend.engine, backend.bus, DemoMetrics(), service)
    async with serve_app(app):
        listener: Listener = app.state.listeners.listener
        await backend.bus.publish([greeting("Ada")])

        async def stored(*names: str) -> bool:
            return await greeting_names(backend.engine) == list(names)

        await eventually(lambda: stored("Ada"))
    assert not listener.running
    assert not [task for task in asyncio.all_tasks() if task.get_name().startswith("consume ")]
    await listener.stop()  # stopping twice is harmless

    # Published while the service is down: the group kept its place, the next start gets it.
    await backend.bus.publish([greeting("Bob")])
    async with serve_app(create_app(backend.engine, backend.bus, DemoMetrics(), service)):
        await eventually(lambda: stored("Ada", "Bob"))
