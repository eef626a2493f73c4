"""MCP cancellations across replicas: a ``notifications/cancelled`` that finds no call of its
user and id on the replica it reached is published on the bus, and every other gateway process
cancels that call if it runs there.

On the handshake-era protocol a client cancels with a request of its own, which a load balancer
may send to another replica than the call's (the SDKs keep no affinity on a stateless server).
Each process reads the channel through a consumer group of its own (a broadcast, dropped when the
process stops), starting with the events published after it started; a process ignores what it
published itself (it has looked already). Delivery is best effort: with the bus down, or a
process that starts the call a moment after the notification passed, the call runs on to its
end or its time-out, as it would have with a lost notification. A relayed cancellation names the
user it came from, as the local one does: nobody cancels another user's call.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Mapping
from typing import Any

from conclave.gateway.events import SOURCE
from conclave.gateway.mcp_relay import InFlightCalls
from conclave.platform.bus.base import Event, EventBus, EventRejected
from conclave.platform.listener import ConsumerMetrics, Listener

log = logging.getLogger(__name__)

CHANNEL = "conclave.mcp.cancel"
"""Where cancellations that found no call on their replica go (payload: ``user_id``,
``request_id``, ``origin``)."""

GROUP_PREFIX = "gateway-cancel:"
"""Each process reads :data:`CHANNEL` through the group ``gateway-cancel:<its consumer name>``."""

MAX_ID_CHARS = 256
"""Longest JSON-RPC id (as text) a relayed cancellation may name: ids are short in practice,
and an event's size is the notification's, not the channel's."""

_MAX_USER_CHARS = 256
_MAX_ID_BITS = 850  # about MAX_ID_CHARS decimal digits, measured without writing them out


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

    async def start(self) -> None:
        """Read the other processes' cancellations until :meth:`stop`."""
        await self._listener.start()

    async def stop(self) -> None:
        """Stop reading, and drop this process's group."""
        await self._listener.stop()

    async def relay(self, user_id: str, request_id: str | int) -> None:
        """Ask the other processes to cancel ``user_id``'s call ``request_id`` (best effort: a
        bus that cannot take it is logged, and the notification's answer does not change)."""
        if _too_long(request_id):
            return
        payload = {"user_id": user_id, "request_id": request_id, "origin": self._origin}
        try:
            await self._bus.publish([Event(channel=CHANNEL, payload=payload, source=SOURCE)])
        except Exception as exc:  # a lost notification, as without the relay
            log.warning("an MCP cancellation could not be relayed", extra={"error": repr(exc)})

    async def _on_cancel(self, event: Event) -> None:
        user_id, request_id, origin = _read(event.payload)
        if origin != self._origin:
            self._in_flight.cancel_id(user_id, request_id)


def _too_long(request_id: str | int) -> bool:
    if isinstance(request_id, str):
        return len(request_id) > MAX_ID_CHARS
    return request_id.bit_length() > _MAX_ID_BITS


def _read(payload: Mapping[str, Any]) -> tuple[str, str | int, str]:
    """The fields of a relayed cancellation; :class:`EventRejected` for an event no gateway
    published (dead-lettered at once rather than redelivered)."""
    user_id, request_id = payload.get("user_id"), payload.get("request_id")
    origin = payload.get("origin")
    if not isinstance(user_id, str) or not 0 < len(user_id) <= _MAX_USER_CHARS:
        raise EventRejected("a relayed MCP cancellation names no usable user")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        raise EventRejected("a relayed MCP cancellation names no JSON-RPC id")
    if _too_long(request_id) or not isinstance(origin, str):
        raise EventRejected("a relayed MCP cancellation is malformed")
    return user_id, request_id, origin
