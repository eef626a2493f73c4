"""The consuming side of the bus: a :class:`Listener` runs a service's handlers as tasks it owns.

A service subscribes each handler to a channel and a consumer group, starts the listener in its
lifespan and stops it on the way out. What a handler does with an event decides what the bus does
with it (see :class:`~conclave.platform.bus.base.EventBus`):

- returns: the event is acknowledged (``handled``);
- raises :class:`~conclave.platform.bus.base.EventRejected` (see :func:`rejecting`): the event can
  never be handled as it is, and moves to ``<channel>.dlq`` at once (``rejected``);
- raises anything else: the event stays pending and is delivered again later (``failed``); an
  outage of a dependency does not count towards dead-lettering.

Delivery is at least once, so a handler that writes dedupes with
:func:`~conclave.platform.consumed_store.mark_consumed` in the transaction of its work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from conclave.platform.bus.base import Event, EventBus, EventRejected, Handler, is_transient
from conclave.platform.errors import ConclaveError
from conclave.platform.metrics import ServiceMetrics

log = logging.getLogger(__name__)

HANDLED, REJECTED, FAILED = "handled", "rejected", "failed"
LAG_INTERVAL_SECONDS = 15.0


class ConsumerMetrics:
    """``conclave_<service>_events_consumed_total{channel, outcome}`` on a service's registry.

    A service declares it once in its metrics module (``self.consumed = ConsumerMetrics(self)``)
    and hands it to its listeners. Channels are a bounded set (constants and configuration).
    """

    def __init__(self, metrics: ServiceMetrics) -> None:
        self._metrics = metrics
        self.events = metrics.counter(
            "events_consumed_total",
            "Bus events delivered to this service's handlers, by channel and outcome (handled; "
            "rejected: dead-lettered at once; failed: left pending for redelivery).",
            ["channel", "outcome"],
        )

        self.lag = metrics.gauge(
            "bus_consumer_lag_entries",
            "Entries of a channel its consumer group has not acknowledged yet (not delivered, or "
            "delivered and pending), as last measured (every 15 s).",
            ["channel", "group"],
        )

    def set_lag(self, channel: str, group: str, entries: int) -> None:
        """Record a group's lag on a channel."""
        self._metrics.child(self.lag, channel, group).set(entries)

    def count(self, channel: str, outcome: str) -> None:
        """Count one delivery of an event of ``channel`` that ended in ``outcome``."""
        self._metrics.child(self.events, channel, outcome).inc()


@dataclass(frozen=True)
class Subscription:
    """A handler of one channel, read through one consumer group."""

    channel: str
    group: str
    handler: Handler
    start: str = "$"
    drop_group_on_stop: bool = False


class Listener:
    """Consumes the channels it is subscribed to, one task per subscription, until stopped.
    ``consumer`` names this process in every group it reads (unique per process: a worker id)."""

    def __init__(
        self,
        bus: EventBus,
        consumer: str,
        metrics: ConsumerMetrics,
        lag_interval_seconds: float = LAG_INTERVAL_SECONDS,
    ) -> None:
        self._bus = bus
        self._lag_interval = lag_interval_seconds
        self._consumer = consumer
        self._metrics = metrics
        self._subscriptions: list[Subscription] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    @property
    def running(self) -> bool:
        """Whether the consumer tasks are started (and not yet stopped)."""
        return bool(self._tasks)

    def subscribe(
        self,
        channel: str,
        group: str,
        handler: Handler,
        *,
        start: str = "$",
        drop_group_on_stop: bool = False,
    ) -> None:
        """Deliver ``channel``'s events to ``handler`` through consumer group ``group``.

        ``start`` is where a group that does not exist yet begins: ``"$"`` (new events only) or
        ``"0"`` (everything still on the stream, so events published before the first consumer
        started are not lost). ``drop_group_on_stop`` deletes the group when the listener stops,
        for a group of this process only (a broadcast that every process reads).
        """
        if self._tasks:
            raise RuntimeError("subscribe before the listener starts")
        self._subscriptions.append(
            Subscription(
                channel, group, handler, start=start, drop_group_on_stop=drop_group_on_stop
            )
        )

    async def start(self) -> None:
        """Start one consumer task per subscription (nothing if already started)."""
        if self._tasks:
            return
        self._stopping.clear()
        for subscription in self._subscriptions:
            consume = self._bus.consume(
                subscription.channel,
                subscription.group,
                self._consumer,
                self._counted(subscription),
                start=subscription.start,
            )
            name = f"consume {subscription.channel} ({subscription.group})"
            self._tasks.append(asyncio.create_task(consume, name=name))
        self._tasks.append(asyncio.create_task(self._measure_lag(), name="measure bus lag"))

    async def _measure_lag(self) -> None:
        """Keep the lag gauge of every subscription current (docs/observability.md), until the
        listener stops. Ended by :attr:`_stopping`, not only by cancellation: redis-py may
        swallow a cancellation that arrives mid-command and answer normally, and this task
        would then sleep on while ``stop`` waits for it."""
        while not self._stopping.is_set():
            for subscription in self._subscriptions:
                try:
                    lag = await self._bus.consumer_lag(subscription.channel, subscription.group)
                except Exception as exc:  # a bus that is down: the consumers say so already
                    log.debug("bus lag not measured: %s", exc)
                    continue
                if self._stopping.is_set():
                    return
                if lag is not None:
                    self._metrics.set_lag(subscription.channel, subscription.group, lag)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._lag_interval)

    async def stop(self) -> None:
        """Cancel the consumer tasks and wait for them (nothing if not running); events not yet
        acknowledged are delivered again later. Then delete the groups of this process only; a
        bus that is down does not fail the stop."""
        tasks, self._tasks = self._tasks, []
        if not tasks:
            return
        self._stopping.set()
        for task in tasks:
            task.cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        for task, outcome in zip(tasks, outcomes, strict=True):
            if isinstance(outcome, Exception):
                log.error("consumer %s had stopped: %r", task.get_name(), outcome)
        for subscription in self._subscriptions:
            if not subscription.drop_group_on_stop:
                continue
            try:
                await self._bus.drop_group(subscription.channel, subscription.group)
            except Exception as exc:  # housekeeping: a bus that is down must not fail a stop
                log.warning("consumer group %s not deleted: %s", subscription.group, exc)

    def _counted(self, subscription: Subscription) -> Handler:
        handler, channel, metrics = subscription.handler, subscription.channel, self._metrics

        async def handle(event: Event) -> None:
            try:
                await handler(event)
            except EventRejected:
                metrics.count(channel, REJECTED)
                raise
            except Exception:
                metrics.count(channel, FAILED)
                raise
            metrics.count(channel, HANDLED)

        return handle


@contextmanager
def rejecting(
    *errors: type[Exception], rejection: type[EventRejected] = EventRejected
) -> Iterator[None]:
    """Inside the block, an error of one of ``errors`` means the event itself is bad: it is raised
    as ``rejection`` with the error's message (a :class:`ConclaveError`'s detail), and the bus
    dead-letters the event at once.

    An error that may pass on redelivery is raised unchanged, whatever its type: a dependency that
    is down, or a :class:`ConclaveError` with a server status (5xx). So ``rejecting(ConclaveError)``
    around a use case rejects the event for the answers a client would get as 4xx.
    """
    try:
        yield
    except errors as exc:
        if is_transient(exc) or (isinstance(exc, ConclaveError) and exc.status >= 500):
            raise
        reason = exc.detail if isinstance(exc, ConclaveError) else str(exc)
        raise rejection(reason) from exc


def dedupe_group(group: str, channel: str) -> str:
    """The group to mark events with when ``group`` reads several channels: an event id taken
    from a stream entry id is unique only within its channel."""
    return f"{group}:{channel}"
