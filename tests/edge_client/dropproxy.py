"""A TCP proxy that lets requests reach a real server and throws its first answers away."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


class ResponseDroppingProxy:
    """Forwards 127.0.0.1:<port> to a server; on the first ``drops`` connections it closes the
    client's side as soon as the server starts answering, so the server has done the work and the
    client never learns the result."""

    def __init__(self, target_port: int, drops: int = 1) -> None:
        self._target_port = target_port
        self._drops_left = drops
        self.dropped = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> None:
        """Listen on a free port."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and end every forwarding task."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(
            "127.0.0.1", self._target_port
        )
        drop = self._drops_left > 0
        self._drops_left -= drop
        self._spawn(self._pipe(reader, upstream_writer))
        if not drop:
            self._spawn(self._pipe(upstream_reader, writer))
            return
        # The first byte of the answer means the server has finished (and committed).
        await upstream_reader.read(1)
        self.dropped += 1
        for stream in (writer, upstream_writer):
            stream.transport.abort()

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                sink.close()
