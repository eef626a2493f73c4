"""MCP cancellations across replicas: a ``notifications/cancelled`` that finds no call of its
user and id on the replica it reached is published on the bus, and every other gateway process
cancels that call if it runs there.

On the handshake-era protocol a client cancels with a request of its own, which a load balancer
may send to another replica than the call's (the SDKs keep no affinity on a stateless server).
Each process reads the channel through a consumer group of its own (a broadcast, dropped when the
process stops; groups of processes that were killed are dropped by the others once idle for
:data:`IDLE_GROUP_SECONDS`), from the events published after it started; a process ignores what
it published itself (it has looked already). A cancellation names the user it came from, as the
local one does: nobody cancels another user's call.

Best effort, and only for a few seconds: notifications are published by one background task per
process (the request is answered at once, whatever the bus does; at most :data:`MAX_WAITING`
wait, the rest are dropped), in batches. One older than :data:`MAX_AGE` when it would be
published or read is dropped, and one applies only to a call that started before it was sent: a
replica whose bus comes back late never cancels a newer call that reuses the id. A lost
cancellation leaves the call to run to its end or its time-out, as without the relay.

Nothing is kept for longer than it can be used: a process publishes only while another one reads
the channel (a group of another process exists: looked at once every :data:`READERS_SECONDS`, so
a replica that just started may miss the cancellations of its first second; a single process, as
in embedded mode, publishes nothing), and, while it publishes, deletes the channel's entries older
than :data:`MAX_AGE` every :data:`TRIM_SECONDS` (an outside attack: every cancellation was kept
up to the bus's ``maxlen``, 100,000 entries of up to a few hundred bytes each).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from conclave.gateway.events import SOURCE
from conclave.gateway.mcp_relay import MAX_PROGRESS_TOKEN_CHARS, Actor, InFlightCalls, bounded_id
from conclave.platform.bus.base import Event, EventBus, EventRejected
from conclave.platform.clock import utc_now
from conclave.platform.inputs import find_unsafe
from conclave.platform.listener import ConsumerMetrics, Listener

log = logging.getLogger(__name__)

CHANNEL = "conclave.mcp.cancel"
"""Where cancellations that found no call on their replica go (payload: ``user_id``,
``request_id``, ``origin``, and ``on_behalf_of`` for a service acting for the user)."""

GROUP_PREFIX = "gateway-cancel:"
"""Each process reads :data:`CHANNEL` through the group ``gateway-cancel:<its name>``."""

MAX_ID_CHARS = MAX_PROGRESS_TOKEN_CHARS
"""Longest string JSON-RPC id a relayed cancellation may name (ids are short in practice)."""

MAX_AGE = timedelta(seconds=5)
"""How old a relayed cancellation may be, when published and when read (clocks of replicas
agree to well within this)."""

MAX_WAITING = 1000
"""Cancellations a process holds for publishing at most; more are dropped."""

READERS_SECONDS = 1.0
"""How long a process trusts what it saw of the other readers of :data:`CHANNEL`."""

TRIM_SECONDS = 1.0
"""How often a process that published trims :data:`CHANNEL` to :data:`MAX_AGE`."""

IDLE_GROUP_SECONDS = 300.0
"""A ``gateway-cancel:`` group none of whose consumers read for this long belongs to a process
that is gone (a live one reads every second): the others drop it."""

_SWEEP_SECONDS = 300.0
_SWEEP_TIMEOUT_SECONDS = 10.0
_PUBLISH_TIMEOUT_SECONDS = 2.0
_BATCH = 100
_MAX_USER_CHARS = 256
_QUIET_SECONDS = 60.0  # one warning per minute while the bus refuses


class CancelRelay:
    """Publishes the cancellations this process could not apply, and applies the others'."""

    def __init__(self, bus: EventBus, in_flight: InFlightCalls, metrics: ConsumerMetrics) -> None:
        self._bus = bus
        self._in_flight = in_flight
        self._origin = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._listener = Listener(bus, self._origin, metrics)
        self._listener.subscribe(
            CHANNEL, GROUP_PREFIX + self._origin, self._on_cancel, drop_group_on_stop=True
        )
        self._waiting: asyncio.Queue[Event] = asyncio.Queue(MAX_WAITING)
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._warned_at = -_QUIET_SECONDS
        self._readers_seen_at = -READERS_SECONDS
        self._others_read = False
        self._published_at = -_QUIET_SECONDS
        """When this process last published (monotonic): it trims the channel until that is
        older than :data:`MAX_AGE`."""

    async def start(self) -> None:
        """Read the other processes' cancellations, and publish this one's, until :meth:`stop`."""
        self._stopping.clear()
        await self._listener.start()
        self._tasks = [
            asyncio.create_task(self._publish_waiting(), name="mcp-cancel-publisher"),
            asyncio.create_task(self._sweep_idle_groups(), name="mcp-cancel-groups"),
            asyncio.create_task(self._trim_old(), name="mcp-cancel-trim"),
        ]

    async def stop(self) -> None:
        """Stop publishing and reading, and drop this process's group (within a few seconds:
        a bus that does not answer leaves the group to the others' sweep)."""
        self._stopping.set()
        # Cancelled again until they end: redis-py sometimes swallows a cancellation that lands
        # while it runs a command (the command then returns normally).
        pending = set(self._tasks)
        deadline = time.monotonic() + _PUBLISH_TIMEOUT_SECONDS
        while pending and time.monotonic() < deadline:
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=0.1)
        self._tasks = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_PUBLISH_TIMEOUT_SECONDS):
                await self._listener.stop()

    def relay(self, actor: Actor, request_id: str | int) -> None:
        """Ask the other processes to cancel ``actor``'s call ``request_id``, in the
        background: an id no call can have (too long, unsafe, beyond ±2**53) is not relayed,
        and one that finds :data:`MAX_WAITING` waiting is dropped."""
        if not relayable(request_id):
            return
        user_id, on_behalf_of = actor
        payload: dict[str, Any] = {
            "user_id": user_id,
            "request_id": request_id,
            "origin": self._origin,
        }
        if on_behalf_of is not None:  # the service acting for the user
            payload["on_behalf_of"] = on_behalf_of
        with contextlib.suppress(asyncio.QueueFull):
            self._waiting.put_nowait(Event(channel=CHANNEL, payload=payload, source=SOURCE))

    async def _publish_waiting(self) -> None:
        while not self._stopping.is_set():
            batch = [await self._waiting.get()]
            while len(batch) < _BATCH and not self._waiting.empty():
                batch.append(self._waiting.get_nowait())
            fresh = [event for event in batch if utc_now() - event.emitted_at <= MAX_AGE]
            if not fresh:
                continue
            try:
                async with asyncio.timeout(_PUBLISH_TIMEOUT_SECONDS):
                    if not await self._read_by_others():
                        continue  # nobody would read them
                    self._published_at = time.monotonic()
                    await self._bus.publish(fresh)
            except Exception as exc:  # lost, as a notification without the relay
                self._warn("MCP cancellations could not be relayed", exc, len(fresh))

    async def _read_by_others(self) -> bool:
        now = time.monotonic()
        if now - self._readers_seen_at >= READERS_SECONDS:
            groups = await self._bus.group_names(CHANNEL, GROUP_PREFIX)
            self._others_read = any(group != GROUP_PREFIX + self._origin for group in groups)
            self._readers_seen_at = now
        return self._others_read

    async def _trim_old(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TRIM_SECONDS):
                    await self._stopping.wait()
            since = time.monotonic() - self._published_at
            if since > MAX_AGE.total_seconds() + 2 * TRIM_SECONDS:
                continue  # what it published is gone already
            try:
                async with asyncio.timeout(_PUBLISH_TIMEOUT_SECONDS):
                    await self._bus.trim_older_than(CHANNEL, MAX_AGE)
            except Exception as exc:  # trimmed at the next turn, or at the bus's maxlen
                self._warn("relayed MCP cancellations could not be trimmed", exc, 0)

    async def _sweep_idle_groups(self) -> None:
        while not self._stopping.is_set():
            try:
                async with asyncio.timeout(_SWEEP_TIMEOUT_SECONDS):
                    await self._bus.drop_idle_groups(CHANNEL, GROUP_PREFIX, IDLE_GROUP_SECONDS)
            except Exception as exc:
                self._warn("idle MCP cancellation groups could not be dropped", exc, 0)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_SWEEP_SECONDS):
                    await self._stopping.wait()

    def _warn(self, message: str, exc: Exception, lost: int) -> None:
        now = time.monotonic()
        if now - self._warned_at >= _QUIET_SECONDS:
            self._warned_at = now
            log.warning(message, extra={"error": type(exc).__name__, "lost": lost})

    async def _on_cancel(self, event: Event) -> None:
        actor, request_id, origin = _read(event.payload)
        if origin == self._origin or abs(utc_now() - event.emitted_at) > MAX_AGE:
            return  # looked at already here; or too old to be about a call still running
        sent_at = event.emitted_at.timestamp()
        self._in_flight.cancel_id(actor, request_id, sent_at=sent_at)


def relayable(request_id: str | int) -> bool:
    """Whether a JSON-RPC id can name a running call and travel on the bus as it is: a string
    of at most :data:`MAX_ID_CHARS` characters the gateway takes (no NUL, no lone surrogate), or
    an integer within ±2**53."""
    return bounded_id(request_id) and find_unsafe(request_id) is None


def _read(payload: Mapping[str, Any]) -> tuple[Actor, str | int, str]:
    """The fields of a relayed cancellation; :class:`EventRejected` for an event no gateway
    publishes (dead-lettered at once rather than redelivered)."""
    user_id, request_id = payload.get("user_id"), payload.get("request_id")
    on_behalf_of, origin = payload.get("on_behalf_of"), payload.get("origin")
    if not isinstance(user_id, str) or not 0 < len(user_id) <= _MAX_USER_CHARS:
        raise EventRejected("a relayed MCP cancellation names no usable user")
    if on_behalf_of is not None and (
        not isinstance(on_behalf_of, str) or not 0 < len(on_behalf_of) <= _MAX_USER_CHARS
    ):
        raise EventRejected("a relayed MCP cancellation names no usable acting service")
    if not isinstance(request_id, str | int) or not relayable(request_id):
        raise EventRejected("a relayed MCP cancellation names no usable JSON-RPC id")
    if not isinstance(origin, str):
        raise EventRejected("a relayed MCP cancellation names no origin")
    return (user_id, on_behalf_of), request_id, origin
