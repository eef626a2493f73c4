"""A TCP proxy a test can cut and restore, to put a real server "down" without stopping it."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlparse


class CuttableProxy:
    """Forwards 127.0.0.1:<port> to a real server; :meth:`cut` refuses and drops connections."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._lose_after: bytes | None = None
        self.lost_replies = 0
        """Replies dropped by :meth:`lose_reply_to` so far."""
        self.port = 0

    def lose_reply_to(self, marker: bytes) -> None:
        """Once: forward the next request holding ``marker``, then drop its connection instead of
        forwarding the server's reply, as if the network failed just after the server acted (a
        database commits, the client never learns it)."""
        self._lose_after = marker

    async def start(self) -> None:
        """Listen on a free port (kept across cut/restore)."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Stop listening and drop every open connection, as if the server died."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def restore(self) -> None:
        """Accept connections again on the same port."""
        await self.start()

    async def close(self) -> None:
        """Stop for good."""
        await self.cut()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._writers.update({writer, upstream_writer})
        armed = asyncio.Event()  # this connection's next reply is to be lost
        pipes = ((reader, upstream_writer, armed, False), (upstream_reader, writer, armed, True))
        for source, sink, event, replies in pipes:
            task = asyncio.create_task(self._pipe(source, sink, event, replies))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        armed: asyncio.Event,
        replies: bool,
    ) -> None:
        try:
            while data := await source.read(65536):
                if replies and armed.is_set():
                    self.lost_replies += 1
                    sink.close()  # the client's side; its end then closes the server's
                    return
                if not replies and self._lose_after is not None and self._lose_after in data:
                    self._lose_after = None
                    armed.set()
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(sink)
            with contextlib.suppress(Exception):
                sink.close()


def through(proxy: CuttableProxy, url: str) -> str:
    """``url`` (a PostgreSQL or Redis URL) pointed at ``proxy`` instead of its server."""
    parsed = urlparse(url)
    return url.replace(parsed.netloc, f"{parsed.username}@127.0.0.1:{proxy.port}")
