"""In-process bus for embedded mode: the semantics of the Redis Streams bus, in one process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from conclave.platform.bus.base import (
    Delivered,
    Event,
    Handler,
    dead_letter_channel,
    deliver_once,
)
from conclave.platform.bus.dead_letters import (
    LISTED_FIELD_CHARS,
    DeadLetter,
    cut_fields,
    dead_letter_of,
)
from conclave.platform.bus.entry import DEFAULT_MAX_EVENT_BYTES, PublishRefused, encode_entries
from conclave.platform.clock import utc_now

log = logging.getLogger(__name__)


@dataclass
class _Delivery:
    event: Event
    deliveries: int
    delivered_at: float


@dataclass
class _Group:
    next_seq: int
    pending: dict[int, _Delivery] = field(default_factory=dict)
    name: str = ""


@dataclass
class _Stream:
    entries: dict[int, Event] = field(default_factory=dict)
    next_seq: int = 0
    groups: dict[str, _Group] = field(default_factory=dict)


class MemoryBus:
    """Streams with consumer groups, acknowledgement, reclaim and dead-lettering, kept in memory.

    Nothing survives the process: embedded mode relies on the outbox (in SQLite) for durability,
    so an event not yet consumed when the process stops is not lost from the emitter's audit log.
    """

    def __init__(
        self,
        *,
        maxlen: int = 100_000,
        max_deliveries: int = 5,
        claim_idle_seconds: float = 60.0,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._maxlen = maxlen
        self._max_event_bytes = max_event_bytes
        self._max_deliveries = max_deliveries
        self._claim_idle = claim_idle_seconds
        self._streams: dict[str, _Stream] = {}
        self._changed = asyncio.Condition()
        # Why each dead-letter entry is there: (dead-letter stream, seq) -> (reason, group).
        self._dead_reasons: dict[tuple[str, int], tuple[str, str]] = {}

    def _stream(self, channel: str) -> _Stream:
        return self._streams.setdefault(channel, _Stream())

    async def publish(self, events: Sequence[Event]) -> None:
        """Append ``events``; wake consumers. An event Redis could not take (it cannot be encoded
        as an entry) is left out, as on Redis: :class:`PublishRefused` once the others are in."""
        encoded, refusals = encode_entries(events, self._max_event_bytes)
        for event, _entry in encoded:
            self._append(event.channel, event)
        async with self._changed:
            self._changed.notify_all()
        if refusals:
            raise PublishRefused(refusals)

    def _append(self, channel: str, event: Event) -> None:
        stream = self._stream(channel)
        stream.entries[stream.next_seq] = event
        stream.next_seq += 1
        while len(stream.entries) > self._maxlen:
            del stream.entries[next(iter(stream.entries))]

    async def ping(self) -> None:
        """The in-process bus is always reachable."""

    async def read(self, channel: str, count: int = 100) -> list[Event]:
        """The newest ``count`` events of ``channel``, oldest first."""
        return list(self._stream(channel).entries.values())[-count:]

    async def consume(
        self, channel: str, group: str, consumer: str, handler: Handler, *, start: str = "$"
    ) -> None:
        """Deliver events of ``channel`` to ``handler`` until cancelled."""
        stream = self._stream(channel)
        if group not in stream.groups:
            first = stream.next_seq if start == "$" else 0
            stream.groups[group] = _Group(next_seq=first, name=group)
        state = stream.groups[group]
        while True:
            work = self._claim(state) or self._next(stream, state)
            if work is None:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for runs the wait in a task
                # of its own and can drop a cancellation that arrives as the condition is
                # notified (stop() then waits for ever) or leave the lock released under us.
                async with self._changed:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self._claim_idle / 4):
                            await self._changed.wait()
                continue
            seq, delivery = work
            outcome, reason = await deliver_once(handler, delivery.event, {"channel": channel})
            if outcome is Delivered.REJECTED:
                log.error(
                    "moving event to dead-letter stream",
                    extra={"channel": channel, "reason": reason},
                )
                state.pending.pop(seq, None)
                self._dead_letter(channel, delivery.event, reason or "rejected", group)
            elif outcome is Delivered.WAITING:
                # Not the event's fault: this delivery does not count.
                delivery.deliveries = max(delivery.deliveries - 1, 0)
                await asyncio.sleep(self._claim_idle / 4)
            elif outcome is Delivered.HANDLED:
                state.pending.pop(seq, None)

    def _next(self, stream: _Stream, state: _Group) -> tuple[int, _Delivery] | None:
        while state.next_seq < stream.next_seq:
            seq = state.next_seq
            state.next_seq += 1
            event = stream.entries.get(seq)
            if event is not None:  # trimmed entries are skipped, as on Redis
                delivery = _Delivery(event, 1, time.monotonic())
                state.pending[seq] = delivery
                return seq, delivery
        return None

    def _dead_letter(self, channel: str, event: Event, reason: str, group: str) -> None:
        dead = dead_letter_channel(channel)
        self._dead_reasons[(dead, self._stream(dead).next_seq)] = (reason, group)
        self._append(dead, event)

    def _claim(self, state: _Group) -> tuple[int, _Delivery] | None:
        now = time.monotonic()
        for seq, delivery in list(state.pending.items()):
            if now - delivery.delivered_at < self._claim_idle:
                continue
            if delivery.deliveries >= self._max_deliveries:
                del state.pending[seq]
                self._dead_letter(
                    delivery.event.channel, delivery.event, "too many deliveries", state.name
                )
                continue
            delivery.deliveries += 1
            delivery.delivered_at = now
            return seq, delivery
        return None

    async def consumer_lag(self, channel: str, group: str) -> int | None:
        """Entries not delivered to ``group`` yet plus those delivered and pending."""
        stream = self._streams.get(channel)
        state = stream.groups.get(group) if stream is not None else None
        if stream is None or state is None:
            return None
        undelivered = sum(1 for seq in stream.entries if seq >= state.next_seq)
        return undelivered + len(state.pending)

    async def dead_letter_channels(self, limit: int = 100) -> list[str]:
        """Channels whose dead-letter stream holds entries, by name."""
        suffix = dead_letter_channel("")
        found = sorted(
            name.removesuffix(suffix)
            for name, stream in self._streams.items()
            if name.endswith(suffix) and stream.entries
        )
        return found[:limit]

    async def dead_letters(self, channel: str, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` entries of ``channel``'s dead-letter stream, each field cut at
        :data:`LISTED_FIELD_CHARS` (``dead_letter`` reads one whole)."""
        dead = dead_letter_channel(channel)
        stream = self._streams.get(dead)
        if stream is None:
            return []
        letters = []
        for seq, event in list(stream.entries.items())[:limit]:
            reason, group = self._dead_reasons.get((dead, seq), ("", ""))
            fields, cut = cut_fields(event.to_fields(), LISTED_FIELD_CHARS)
            letters.append(dead_letter_of(channel, f"{seq}-0", fields, reason, group, cut))
        return letters

    async def dead_letter(self, channel: str, entry_id: str) -> DeadLetter | None:
        """One dead-letter entry, whole, or ``None``."""
        dead = dead_letter_channel(channel)
        seq = _memory_seq(entry_id)
        stream = self._streams.get(dead)
        event = stream.entries.get(seq) if stream is not None and seq is not None else None
        if event is None or seq is None:
            return None
        reason, group = self._dead_reasons.get((dead, seq), ("", ""))
        return dead_letter_of(channel, entry_id, event.to_fields(), reason, group)

    async def remove_dead_letter(self, channel: str, entry_id: str) -> bool:
        """Delete one dead-letter entry; whether it was there."""
        dead = dead_letter_channel(channel)
        stream = self._streams.get(dead)
        seq = _memory_seq(entry_id)
        if stream is None or seq is None:
            return False
        self._dead_reasons.pop((dead, seq), None)
        return stream.entries.pop(seq, None) is not None

    async def trim_older_than(self, channel: str, age: timedelta) -> None:
        """Delete the entries of ``channel`` emitted more than ``age`` ago (from the oldest on,
        up to the first newer one); the process's clock is this bus's."""
        stream = self._streams.get(channel)
        if stream is None:
            return
        before = utc_now() - age
        entries = stream.entries
        while entries:
            oldest = next(iter(entries))
            if entries[oldest].emitted_at >= before:
                break
            del entries[oldest]

    async def group_names(self, channel: str, prefix: str) -> list[str]:
        """The groups of ``channel`` named ``prefix…``."""
        stream = self._streams.get(channel)
        if stream is None:
            return []
        return [name for name in stream.groups if name.startswith(prefix)][:1000]

    async def drop_idle_groups(self, channel: str, prefix: str, idle_seconds: float) -> int:
        """Nothing: this bus lives in one process, and a group of it ends with its reader (a
        stopped listener drops its own)."""
        return 0

    async def drop_group(self, channel: str, group: str) -> None:
        """Forget ``group`` (its pending entries with it)."""
        stream = self._streams.get(channel)
        if stream is not None:
            stream.groups.pop(group, None)

    async def close(self) -> None:
        """Nothing to release."""


def _memory_seq(entry_id: str) -> int | None:
    """The sequence number of an entry id this bus gave (``<seq>-0``), or ``None``."""
    seq_text, _, rest = entry_id.partition("-")
    if rest != "0" or not seq_text.isdigit() or len(seq_text) > 20:
        return None
    return int(seq_text)
