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
        # One task per accepted connection, from its accept until both its sockets are closed:
        # a cut cancels them wherever they are, a connection still opening to the server
        # included (otherwise it would open after the cut and forward through it).
        self._connections: set[asyncio.Task[None]] = set()
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
        """Stop listening and drop every open connection, as if the server died. Returns once
        every socket the proxy opened or accepted is closed."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for connection in list(self._connections):
            connection.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if server is not None:
            # After the connections: from Python 3.12 this waits for them too.
            await server.wait_closed()

    async def restore(self) -> None:
        """Accept connections again on the same port."""
        await self.start()

    async def close(self) -> None:
        """Stop for good."""
        await self.cut()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = asyncio.current_task()
        assert connection is not None
        self._connections.add(connection)
        writers = [writer]
        try:
            if self._server is None:
                return  # accepted just before a cut that ran before this task's first step
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
            writers.append(upstream_writer)
            armed = asyncio.Event()  # this connection's next reply is to be lost
            await asyncio.gather(
                self._pipe(reader, upstream_writer, armed, replies=False),
                self._pipe(upstream_reader, writer, armed, replies=True),
            )
        except (OSError, asyncio.CancelledError):
            # Refused by the server, or cut: either way the connection ends here. The task
            # returns rather than ends cancelled: asyncio's server reports a handler that does
            # not return as an unhandled error.
            pass
        finally:
            for each in writers:
                each.close()
            for each in writers:
                with contextlib.suppress(Exception):
                    await each.wait_closed()
            self._connections.discard(connection)

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
                    return  # closing the client's side (below) ends the connection
                if not replies and self._lose_after is not None and self._lose_after in data:
                    self._lose_after = None
                    armed.set()
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            sink.close()  # one direction ended: end the other (the connection's task awaits it)


def through(proxy: CuttableProxy, url: str) -> str:
    """``url`` (a PostgreSQL or Redis URL) pointed at ``proxy`` instead of its server."""
    parsed = urlparse(url)
    return url.replace(parsed.netloc, f"{parsed.username}@127.0.0.1:{proxy.port}")
