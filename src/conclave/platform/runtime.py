"""The shared runtime of a service process: store engine, group-commit writer, bus, outbox relay."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.bus.base import EventBus
from conclave.platform.bus.factory import BusOptions, create_bus
from conclave.platform.db.batch import BatchWriter
from conclave.platform.db.engine import create_engine, ping
from conclave.platform.db.migrate import migrate
from conclave.platform.errors import ConclaveError
from conclave.platform.outbox import OutboxRelay
from conclave.platform.outbox_store import OutboxFigures, outbox_figures
from conclave.settings import CommonSettings

_CHECK_TIMEOUT_SECONDS = 2.0


@dataclass
class Platform:
    """What every service shares in one process. ``conclave up`` shares one between all four."""

    settings: CommonSettings
    engine: AsyncEngine
    bus: EventBus
    writer: BatchWriter
    relay: OutboxRelay

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        settings: CommonSettings,
        *,
        engine: AsyncEngine | None = None,
        bus: EventBus | None = None,
        max_batch: int = 256,
    ) -> AsyncIterator[Platform]:
        """Open the store (migrating it if allowed), the bus, the writer and the relay.

        ``engine`` and ``bus`` may be passed in (tests isolate each test this way); the caller then
        keeps ownership of them.
        """
        async with AsyncExitStack() as stack:
            if engine is None:
                engine = create_engine(
                    settings.resolved_database_url(),
                    pool_size=settings.database_pool_size,
                    schema=settings.database_schema,
                )
                stack.push_async_callback(engine.dispose)
            if settings.auto_migrate:
                await migrate(engine)
            if bus is None:
                bus = create_bus(
                    settings.resolved_bus_url(),
                    BusOptions(
                        stream_prefix=settings.bus_stream_prefix,
                        maxlen=settings.bus_stream_maxlen,
                        max_deliveries=settings.bus_max_deliveries,
                        claim_idle_seconds=settings.bus_claim_idle_seconds,
                        max_event_bytes=settings.bus_max_event_bytes,
                    ),
                )
                stack.push_async_callback(bus.close)
            writer = BatchWriter(engine, max_batch=max_batch, committers=settings.db_committers)
            relay = OutboxRelay(
                engine,
                bus,
                poll_seconds=settings.outbox_poll_seconds,
                max_backoff_seconds=settings.outbox_max_backoff_seconds,
                retention=timedelta(hours=settings.outbox_retention_hours),
                writer=writer,
                quarantine_after_attempts=settings.outbox_quarantine_after_attempts,
            )
            writer.after_commit(relay.handoff)
            await writer.start()
            stack.push_async_callback(writer.stop)
            await relay.start()
            stack.push_async_callback(relay.stop)
            yield cls(settings=settings, engine=engine, bus=bus, writer=writer, relay=relay)

    async def check(self) -> dict[str, dict[str, Any]]:
        """Ping the store and the bus; report each with its latency, the outbox backlog and its
        quarantined rows (status ``warning`` while there are some: see :meth:`warnings`)."""
        store = await _timed(ping(self.engine))
        bus = await _timed(self.bus.ping())
        checks = {"store": store, "bus": bus}
        if store["status"] == "up":
            counted = await _timed(outbox_figures(self.engine))
            figures = counted.get("value") or OutboxFigures(pending=0, quarantined=0)
            if "value" in counted:
                self.relay.quarantined = figures.quarantined
            checks["outbox"] = {
                "status": "warning" if figures.quarantined else "up",
                "pending": figures.pending,
                "quarantined": figures.quarantined,
            }
        return checks

    def warnings(self) -> list[str]:
        """What an operator should look at although the service works (for ``/health``, which
        stays 200 for them: a load balancer has no reason to drop a replica that serves)."""
        count = self.relay.quarantined
        if not count:
            return []
        return [
            f"{count} outbox event{'s' if count != 1 else ''} quarantined: the bus refused "
            "them and they are not delivered; see `conclave outbox list`"
        ]


async def _timed(awaitable: Any) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        value = await asyncio.wait_for(awaitable, timeout=_CHECK_TIMEOUT_SECONDS)
    except (ConclaveError, TimeoutError, OSError) as exc:
        detail = exc.detail if isinstance(exc, ConclaveError) else "no answer in time"
        return {"status": "down", "error": detail}
    result: dict[str, Any] = {
        "status": "up",
        "latency_ms": round((time.perf_counter() - started) * 1000, 2),
    }
    if value is not None:
        result["value"] = value
    return result
