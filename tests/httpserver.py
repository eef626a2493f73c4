"""Run an ASGI app on a real loopback socket inside the test's event loop."""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def reserved_port() -> int:
    """A free port for a server started later in another process, chosen below the kernel's
    ephemeral range: a port from :func:`free_port` is free only until some socket (another test
    worker's server, any outgoing connection) is given it, and a service that starts seconds
    later may find it taken, or another server answering there."""
    # The system's randomness: pytest-randomly seeds `random` alike in every test worker.
    upper = max(_first_ephemeral_port(), 21_000)
    for _ in range(200):
        port = _chance.randrange(20_000, upper)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


_chance = random.SystemRandom()


def _first_ephemeral_port() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as lines:
            return int(lines.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


@asynccontextmanager
async def running_server(app: Any, port: int | None = None, **options: Any) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn until the block ends; yields its base URL. ``options`` go to
    ``uvicorn.Config`` (``ssl_certfile``/``ssl_keyfile`` serve HTTPS)."""
    port = port or free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_config=None, lifespan="on", **options
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # surfaces the start-up error
        await asyncio.sleep(0.01)
    try:
        scheme = "https" if options.get("ssl_certfile") else "http"
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
