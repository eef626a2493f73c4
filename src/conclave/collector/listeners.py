"""Bus listeners: ``collector.expedition.run.requested``, the bridge of configured channels, and
the ``collector.expedition.run.queued`` wake-up.

The first two turn an event into a queued expedition, exactly like ``POST /expedition/run``. The
event id is marked consumed (``mark_consumed``) in the same transaction as the expedition, so a
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

import uuid
from collections.abc import Callable, Mapping

from pydantic import ValidationError

from conclave.collector.agents.context import BRIDGE_REQUESTER
from conclave.collector.events import QUEUED, REQUESTED
from conclave.collector.models import ExpeditionCreate
from conclave.collector.service import ExpeditionService
from conclave.platform.bus.base import Event, EventRejected
from conclave.platform.errors import ConclaveError
from conclave.platform.listener import Listener, dedupe_group, rejecting

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


class ExpeditionListeners:
    """Consumes the request channel, the bridge channels and the wake-up until stopped."""

    def __init__(
        self,
        service: ExpeditionService,
        bridge: Mapping[str, str],
        consumer: str,
        wake: Callable[[], None],
    ) -> None:
        self._service = service
        self._bridge = dict(bridge)
        self._wake = wake
        self._listener = Listener(service.platform.bus, consumer, service.metrics.consumed)
        # A new group starts at the beginning of the stream, so requests published before the
        # first collector started are not lost.
        self._listener.subscribe(REQUESTED, REQUESTED_GROUP, self.on_requested, start="0")
        self._listener.subscribe(
            QUEUED, WAKE_GROUP_PREFIX + consumer, self.on_queued, drop_group_on_stop=True
        )
        for channel in self._bridge:
            self._listener.subscribe(channel, BRIDGE_GROUP, self.on_bridged, start="0")

    async def start(self) -> None:
        """Start one consumer per channel."""
        await self._listener.start()

    async def stop(self) -> None:
        """Stop consuming (unacknowledged events are redelivered later) and delete this process's
        wake-up group, which nobody else reads."""
        await self._listener.stop()

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
        with rejecting(ValidationError, ValueError, rejection=InvalidRequestEvent):
            request = ExpeditionCreate.model_validate(payload)
            expedition_id = str(uuid.UUID(str(given_id))) if given_id else None
        await self._submit(
            request,
            event,
            REQUESTED_GROUP,
            expedition_id or _expedition_id(event, REQUESTED_GROUP),
            requested_by,
        )

    async def on_bridged(self, event: Event) -> None:
        """An event of a bridged channel → expedition of the mapped type."""
        with rejecting(ValidationError, rejection=InvalidRequestEvent):
            request = ExpeditionCreate(
                expedition_type=self._bridge[event.channel],
                parameters={"event": dict(event.payload), "channel": event.channel},
                correlation_id=event.correlation_id,
            )
        group = dedupe_group(BRIDGE_GROUP, event.channel)
        await self._submit(request, event, group, _expedition_id(event, group), BRIDGE_REQUESTER)

    async def _submit(
        self,
        request: ExpeditionCreate,
        event: Event,
        group: str,
        expedition_id: str,
        requested_by: str | None,
    ) -> None:
        # A client error of the use case answers the same on redelivery; a store that is down
        # leaves the event pending.
        with rejecting(ConclaveError, rejection=InvalidRequestEvent):
            await self._service.submit(
                request,
                requested_by=requested_by,
                expedition_id=expedition_id,
                dedupe=(group, event.event_id),
            )
