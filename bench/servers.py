"""What every benchmark needs to run servers as subprocesses on loopback."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx
from redis.asyncio import Redis

from conclave.platform.transparency import generate_key

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = os.environ.get("BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (NaN where ``/proc`` is missing): on a
    shared machine a server's CPU per request moves much less than its requests per second."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


@dataclass(frozen=True)
class Scratch:
    """A throw-away PostgreSQL database and Redis key prefix for one benchmark run."""

    database: str
    prefix: str
    log_keys: str = field(
        default_factory=lambda: ",".join(
            generate_key(f"conclave.localhost/{name}")[0] for name in ("calls", "packs")
        ),
        repr=False,
    )
    """The signer keys of the gateway's calls log and the edge's packs log (on PostgreSQL a
    log's key must be given; each service takes the key named after its log)."""

    @property
    def dsn(self) -> str:
        """The database for asyncpg."""
        return PG_ADMIN.rsplit("/", 1)[0] + f"/{self.database}"

    @property
    def url(self) -> str:
        """The database for the services (``CONCLAVE_DATABASE_URL``)."""
        return self.dsn.replace("postgresql://", "postgresql+asyncpg://", 1)

    def env(self) -> dict[str, str]:
        """What a service needs to run on these stores."""
        return {
            "CONCLAVE_DATABASE_URL": self.url,
            "CONCLAVE_BUS_URL": REDIS_URL,
            "BUS_STREAM_PREFIX": self.prefix,
            "CONCLAVE_TLOG_SIGNER_KEYS": self.log_keys,
        }

    async def count(self, query: str) -> int:
        """The single number ``query`` selects."""
        connection = await asyncpg.connect(self.dsn)
        try:
            return int(await connection.fetchval(query))
        finally:
            await connection.close()

    async def unpublished(self) -> int:
        """Outbox rows not published yet (0 once every event reached the bus)."""
        return await self.count("SELECT count(*) FROM outbox_events WHERE published_at IS NULL")

    async def stream_length(self, channel: str) -> int:
        """Entries on ``channel``'s stream."""
        redis = Redis.from_url(REDIS_URL)
        try:
            return int(await redis.xlen(self.prefix + channel))
        finally:
            await redis.aclose()


@asynccontextmanager
async def scratch_stores(tag: str = "bench") -> AsyncIterator[Scratch]:
    """Create the stores, yield them, then drop the database and delete the keys. Stop the
    servers using them inside the block."""
    suffix = uuid.uuid4().hex[:8]
    scratch = Scratch(f"conclave_{tag}_{suffix}", f"{tag}:{suffix}:")
    admin = await asyncpg.connect(PG_ADMIN)
    await admin.execute(f'CREATE DATABASE "{scratch.database}"')
    try:
        yield scratch
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{scratch.database}" WITH (FORCE)')
        await admin.close()
        redis = Redis.from_url(REDIS_URL)
        keys = [key async for key in redis.scan_iter(match=f"{scratch.prefix}*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()
