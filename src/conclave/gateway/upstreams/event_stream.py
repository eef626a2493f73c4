"""The message events of a ``text/event-stream`` body, read as its bytes arrive.

For the direct calls (:mod:`.direct_calls`): an upstream that answers a POST with a stream sends
the answer as one of its events, maybe after notifications, and may keep the stream open after
it. So events are handed on one by one as they complete (the caller stops at its answer), each
bounded by the message cap (the stream as a whole is bounded by the call's time-out, as on the
SDK's path), and the parsing gives the event loop a turn after every chunk read: a stream of
hundreds of thousands of tiny events cannot hold the loop for long at a time.

The format is the WHATWG one: lines end with CR LF, LF or CR; ``data:`` lines are joined with
LF; a blank line ends an event; ``event:`` names it (only unnamed and ``message`` events carry
JSON-RPC messages); comments (``:``) and other fields are passed over; an event cut off by the end
of the stream is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator


class EventTooLarge(Exception):
    """One event (or one line) is larger than the cap."""


async def message_events(chunks: AsyncIterator[bytes], cap: int) -> AsyncGenerator[bytes, None]:
    """The data of each message event in the stream ``chunks``, in order."""
    pending = b""
    data: list[bytes] = []
    size = 0
    kind = b""
    async for chunk in chunks:
        lines = (pending + chunk).splitlines(keepends=True)
        pending = b""
        # The last line waits for more when it has no end yet, or ends with CR (LF may follow).
        if lines and (lines[-1].endswith(b"\r") or not lines[-1].endswith(b"\n")):
            pending = lines.pop()
            if len(pending) > cap:
                raise EventTooLarge
        for raw in lines:
            line = raw.rstrip(b"\r\n")
            if not line:
                if data and kind in (b"", b"message"):
                    yield b"\n".join(data)
                data, size, kind = [], 0, b""
            elif not line.startswith(b":"):
                name, _, value = line.partition(b":")
                value = value[1:] if value.startswith(b" ") else value
                if name == b"data":
                    size += len(value) + 1
                    if size > cap:
                        raise EventTooLarge
                    data.append(value)
                elif name == b"event":
                    kind = value
        await asyncio.sleep(0)
    if pending.rstrip(b"\r\n") == b"" and pending and data and kind in (b"", b"message"):
        yield b"\n".join(data)  # the stream's last blank line ended with a lone CR
