"""What an upstream sends, checked before the SDK's client session reads it.

The SDK's client dispatcher converts a ``notifications/progress``'s ``progress`` and ``total``
with ``float()`` in its receive loop, uncaught: an integer beyond a float (``10**400``, a valid
JSON number) raises ``OverflowError`` there. Over stdio that loop carries every user's calls to
the upstream, so one hostile or buggy report would end them all and force a restart; over HTTP it
fails the call that asked for progress. :class:`GuardedReadStream` sits between the transport
and the session and makes such a notification harmless first: a ``progress`` that is not a
number within ±2**53 drops the notification (the call goes on, without that report); a ``total``
that is not one is left out. Everything else passes untouched.
"""

from __future__ import annotations

import math
from types import TracebackType
from typing import Any

import mcp_types as types
from mcp.shared._stream_protocols import ReadStream
from mcp.shared.message import SessionMessage

_LARGEST = 2**53  # as conclave.gateway.progress: beyond it no client reads a number exactly

Item = SessionMessage | Exception


def _usable(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):
        return abs(value) <= _LARGEST  # compared as integers: float() is what must not run
    return math.isfinite(value) and abs(value) <= _LARGEST


def guarded(item: Item) -> Item | None:
    """``item`` as the session may read it, or ``None`` to drop it."""
    if not isinstance(item, SessionMessage):
        return item
    message = item.message
    if not isinstance(message, types.JSONRPCNotification):
        return item
    if message.method != "notifications/progress" or not isinstance(message.params, dict):
        return item
    params = message.params
    if "progress" in params and not _usable(params["progress"]):
        return None
    if "total" in params and params["total"] is not None and not _usable(params["total"]):
        kept = {key: value for key, value in params.items() if key != "total"}
        notification = message.model_copy(update={"params": kept})
        return SessionMessage(message=notification, metadata=item.metadata)
    return item


class GuardedReadStream:
    """A transport's read stream with every item passed through :func:`guarded`."""

    def __init__(self, inner: ReadStream[Item]) -> None:
        self._inner = inner

    @property
    def last_context(self) -> Any:
        # The SDK's dispatcher reads it (duck-typed) to run handlers in the sender's context.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Item:
        while True:
            item = guarded(await self._inner.receive())
            if item is not None:
                return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> GuardedReadStream:
        return self

    async def __anext__(self) -> Item:
        while True:
            item = guarded(await self._inner.__anext__())
            if item is not None:
                return item

    async def __aenter__(self) -> GuardedReadStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
