"""What every benchmark needs to run servers as subprocesses on loopback."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = os.environ.get("BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_process(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``args`` from the project folder with ``env`` on top of this environment."""
    return subprocess.Popen(
        args, cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def wait_ready(port: int, path: str, attempts: int = 300) -> None:
    """Wait until ``GET path`` answers below 500 (a server's start-up includes migrations)."""
    async with httpx.AsyncClient() as client:
        for _ in range(attempts):
            try:
                if (await client.get(f"http://127.0.0.1:{port}{path}")).status_code < 500:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"server on port {port} did not start")
