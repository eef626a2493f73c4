"""Bus listeners: ``collector.expedition.run.requested``, the bridge of configured channels, and
the ``collector.expedition.run.queued`` wake-up.

The first two turn an event into a queued expedition, exactly like ``POST /expedition/run``. The
event id is recorded in ``consumed_events`` in the same transaction as the expedition, so a
redelivered event (at-least-once bus) creates nothing new. The bridge reads several channels in one
group, and an event id taken from a stream entry id is unique only within its channel: the bridge
records its events per channel. An event that is not a valid request (its payload, or an envelope
value too long for the record) is rejected: the bus moves it to ``<channel>.dlq`` at once, and
redelivers only what failed for a reason that may pass (the store is down).

The wake-up must reach *every* worker process, so each process reads it through a consumer group
of its own (``collector-wake.<worker id>``), starting at new entries only. The handler just wakes
the local worker, which then claims from the store as usual; duplicates and losses are harmless.
A process deletes its group when it stops. A process that is killed leaves its group behind (a
few bytes in Redis, read by nobody): Redis 7.0 does not update a consumer's idle time on reads
that find nothing, so the groups of dead processes cannot be told from those of idle live ones
without a liveness record of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping

from pydantic import ValidationError

from conclave.collector.events import QUEUED, REQUESTED
from conclave.collector.models import ExpeditionCreate
from conclave.collector.service import ExpeditionService
from conclave.platform.bus.base import Event, EventRejected
from conclave.platform.errors import ConclaveError

log = logging.getLogger(__name__)

REQUESTED_GROUP = "collector"
BRIDGE_GROUP = "collector-bridge"
WAKE_GROUP_PREFIX = "collector-wake."
_EVENT_NAMESPACE = uuid.UUID("0f8cde9e-3b7a-4c51-a1d2-6a4e1c3f7b90")


# The ``requested_by`` column of an expedition.
MAX_REQUESTED_BY_LENGTH = 256


class InvalidRequestEvent(EventRejected):
    """The event is not a valid expedition request."""


def _expedition_id(event: Event, group: str) -> str:
    # Derived from the event, so the same event always maps to the same expedition.
    return str(uuid.uuid5(_EVENT_NAMESPACE, f"{group}:{event.event_id}"))


def _bridge_group(channel: str) -> str:
    # The dedupe group of a bridged channel's events (see the module's docstring).
    return f"{BRIDGE_GROUP}:{channel}"


class ExpeditionListeners:
    """Consumes the request channel and the bridge channels until stopped."""

    def __init__(
        self,
        service: ExpeditionService,
        bridge: Mapping[str, str],
        consumer: str,
        wake: Callable[[], None],
    ) -> None:
        self._service = service
        self._bridge = dict(bridge)
        self._consumer = consumer
        self._wake = wake
        self._wake_group = WAKE_GROUP_PREFIX + consumer
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start one consumer per channel. A new group starts at the beginning of the stream,
        so requests published before the first collector started are not lost."""
        bus = self._service.platform.bus
        self._tasks.append(
            asyncio.create_task(
                bus.consume(
                    REQUESTED, REQUESTED_GROUP, self._consumer, self.on_requested, start="0"
                )
            )
        )
        self._tasks.append(
            asyncio.create_task(
                bus.consume(QUEUED, self._wake_group, self._consumer, self.on_queued)
            )
        )
        for channel in self._bridge:
            self._tasks.append(
                asyncio.create_task(
                    bus.consume(channel, BRIDGE_GROUP, self._consumer, self.on_bridged, start="0")
                )
            )

    async def stop(self) -> None:
        """Stop consuming (unacknowledged events are redelivered later) and delete this process's
        wake-up group, which nobody else reads."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._tasks:
            try:
                await self._service.platform.bus.drop_group(QUEUED, self._wake_group)
            except Exception as exc:  # housekeeping: a bus that is down must not fail a stop
                log.warning("wake-up group not deleted: %s", exc)
        self._tasks = []

    async def on_queued(self, _event: Event) -> None:
        """``collector.expedition.run.queued`` (any process) → look at the queue now."""
        self._wake()

    async def on_requested(self, event: Event) -> None:
        """``collector.expedition.run.requested`` → queued expedition."""
        payload = dict(event.payload)
        payload.setdefault("correlation_id", event.correlation_id)
        requested_by = payload.pop("requested_by", None) or event.source or None
        given_id = payload.pop("expedition_id", None)
        if requested_by is not None and not isinstance(requested_by, str):
            raise InvalidRequestEvent("requested_by is not a string")
        if requested_by is not None and len(requested_by) > MAX_REQUESTED_BY_LENGTH:
            raise InvalidRequestEvent(
                f"requested_by is longer than {MAX_REQUESTED_BY_LENGTH} characters"
            )
        try:
            request = ExpeditionCreate.model_validate(payload)
            expedition_id = str(uuid.UUID(str(given_id))) if given_id else None
        except (ValidationError, ValueError) as exc:
            raise InvalidRequestEvent(str(exc)) from exc
        await self._submit(
            request,
            event,
            REQUESTED_GROUP,
            expedition_id or _expedition_id(event, REQUESTED_GROUP),
            requested_by,
        )

    async def on_bridged(self, event: Event) -> None:
        """An event of a bridged channel → expedition of the mapped type."""
        try:
            request = ExpeditionCreate(
                expedition_type=self._bridge[event.channel],
                parameters={"event": dict(event.payload), "channel": event.channel},
                correlation_id=event.correlation_id,
            )
        except ValidationError as exc:
            raise InvalidRequestEvent(str(exc)) from exc
        group = _bridge_group(event.channel)
        await self._submit(request, event, group, _expedition_id(event, group), "bridge")

    async def _submit(
        self,
        request: ExpeditionCreate,
        event: Event,
        group: str,
        expedition_id: str,
        requested_by: str | None,
    ) -> None:
        try:
            await self._service.submit(
                request,
                requested_by=requested_by,
                expedition_id=expedition_id,
                dedupe=(group, event.event_id),
            )
        except ConclaveError as exc:
            if exc.status >= 500:
                raise  # store down: leave the event pending, it is redelivered
            raise InvalidRequestEvent(exc.detail) from exc
