"""Bus vocabulary shared by both implementations."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from conclave.platform.clock import rfc3339, utc_now
from conclave.platform.db.engine import is_store_down
from conclave.platform.errors import Unavailable
from conclave.platform.ids import new_id
from conclave.platform.jsontext import compact_text
from conclave.platform.logs import correlation_id_var

if TYPE_CHECKING:
    from conclave.platform.bus.dead_letters import DeadLetter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    """One bus entry. ``payload`` is the channel's documented payload; the rest is the envelope."""

    channel: str
    payload: Mapping[str, Any]
    source: str
    event_id: str = field(default_factory=new_id)
    emitted_at: datetime = field(default_factory=utc_now)
    correlation_id: str | None = None

    def to_fields(self) -> dict[str, str]:
        """The entry's fields as stored on a Redis stream (all strings)."""
        return {
            "event_id": self.event_id,
            "channel": self.channel,
            "source": self.source,
            "emitted_at": rfc3339(self.emitted_at),
            "correlation_id": self.correlation_id or "",
            "payload": compact_text(self.payload),
        }


Handler = Callable[[Event], Awaitable[None]]


class EventRejected(Exception):
    """Raised by a handler for an event that can never be handled as it is (bad input, not an
    outage): the bus moves it to the dead letters at once, with the message as the reason,
    instead of redelivering it ``max_deliveries`` times."""


def is_transient(exc: BaseException) -> bool:
    """Whether a handler failed because something it needs is down (the store, another service),
    not because of the event. Such a delivery does not count towards dead-lettering: an outage
    longer than ``max_deliveries`` redeliveries must not move valid events to the dead letters."""
    return isinstance(exc, Unavailable) or is_store_down(exc)


async def deliver(handler: Handler, event: Event) -> None:
    """Call ``handler`` with the event's correlation id in the log context, so every line the
    handler logs carries it (and nothing of it is left for the next event)."""
    token = correlation_id_var.set(event.correlation_id)
    try:
        await handler(event)
    finally:
        correlation_id_var.reset(token)


class Delivered(Enum):
    """What one delivery of an event to its handler came to, for the bus to act on."""

    HANDLED = "handled"  # acknowledge it
    REJECTED = "rejected"  # the handler refused it for good: dead-letter it at once
    WAITING = "waiting"  # a dependency is down: this delivery does not count, retry later
    FAILED = "failed"  # left pending: delivered again after the idle time


async def deliver_once(
    handler: Handler, event: Event, where: Mapping[str, str]
) -> tuple[Delivered, str]:
    """Deliver ``event`` (see :func:`deliver`) and say what became of it, with the dead-letter
    reason of a rejection. A handler's failure is logged here, with ``where`` (the channel or
    the stream) as log fields; the bus logs what it does about a rejection."""
    try:
        await deliver(handler, event)
    except EventRejected as exc:
        return Delivered.REJECTED, f"rejected: {exc}"
    except Exception as exc:
        if is_transient(exc):
            log.warning("handler waits for a dependency", extra=dict(where))
            return Delivered.WAITING, ""
        log.exception("handler failed", extra={**where, "event_id": event.event_id})
        return Delivered.FAILED, ""
    return Delivered.HANDLED, ""


def dead_letter_channel(channel: str) -> str:
    """Where poison entries of ``channel`` go after too many deliveries."""
    return f"{channel}.dlq"


class EventBus(Protocol):
    """Publish events and consume them through consumer groups (at-least-once delivery).

    A handler that returns normally acknowledges the event; one that raises leaves it pending, to be
    delivered again (to any consumer of the group) after ``claim_idle_seconds``; after
    ``max_deliveries`` deliveries it moves to ``<channel>.dlq``. A handler that raises
    :class:`EventRejected` sends it there at once. Handlers must be idempotent (dedupe by
    ``event_id``, which is unique within a channel: an event id taken from a stream entry id may
    recur on another channel, so a group reading several channels dedupes by both).
    """

    async def publish(self, events: Sequence[Event]) -> None:
        """Append ``events`` to their channels, in order per channel.

        Raises ``BusUnavailable`` when the bus is down (retry the whole publish later), and
        :class:`~conclave.platform.bus.entry.PublishRefused` naming the events refused for a
        reason of their own (cannot be encoded, too large, refused by the server) after
        publishing all the others.
        """
        ...

    async def ping(self) -> None:
        """Raise ``BusUnavailable`` when the bus does not answer."""
        ...

    async def consume(
        self,
        channel: str,
        group: str,
        consumer: str,
        handler: Handler,
        *,
        start: str = "$",
    ) -> None:
        """Deliver the channel's events to ``handler`` until cancelled.

        ``start`` is where a newly created group begins: ``"$"`` (only new events) or ``"0"``
        (everything still on the stream).
        """
        ...

    async def read(self, channel: str, count: int = 100) -> list[Event]:
        """The newest ``count`` events of ``channel``, oldest first (diagnostics and tests)."""
        ...

    async def trim_older_than(self, channel: str, age: timedelta) -> None:
        """Delete the entries of ``channel`` added more than ``age`` ago by the bus's own clock,
        for a channel whose events are worthless after a while (its own bound, well under
        ``maxlen``). By the bus's clock, never the caller's: a process whose clock runs ahead
        would otherwise delete what was just published. Approximately, as ``maxlen``: Redis
        keeps the older entries that share a radix-tree node with newer ones (``MINID ~``, by
        Redis's ``TIME``); the in-process bus deletes every entry emitted earlier."""
        ...

    async def group_names(self, channel: str, prefix: str) -> list[str]:
        """The names of the consumer groups of ``channel`` that start with ``prefix`` (at most
        1,000): who reads a broadcast channel now."""
        ...

    async def drop_group(self, channel: str, group: str) -> None:
        """Delete the consumer group ``group`` of ``channel`` (nothing if there is none). For
        groups of one process (a broadcast read), when that process stops."""
        ...

    async def drop_idle_groups(self, channel: str, prefix: str, idle_seconds: float) -> int:
        """Delete the consumer groups of ``channel`` whose names start with ``prefix`` and none
        of whose consumers has read for ``idle_seconds`` (groups of one process that is gone:
        killed before it could drop its own); how many were deleted. A group no consumer has
        read yet is kept (its process may be starting)."""
        ...

    async def consumer_lag(self, channel: str, group: str) -> int | None:
        """Entries of ``channel`` that ``group`` has not acknowledged yet (never delivered, or
        delivered and pending); ``None`` when the bus cannot tell (no such group)."""
        ...

    async def dead_letter_channels(self, limit: int = 100) -> list[str]:
        """The channels (at most ``limit``, by name) whose dead-letter stream holds entries."""
        ...

    async def dead_letters(self, channel: str, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` entries of ``channel``'s dead-letter stream."""
        ...

    async def dead_letter(self, channel: str, entry_id: str) -> DeadLetter | None:
        """One entry of ``channel``'s dead-letter stream, or ``None``."""
        ...

    async def remove_dead_letter(self, channel: str, entry_id: str) -> bool:
        """Delete one entry of ``channel``'s dead-letter stream; whether it was there."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
