"""The production topology for the fault tests, started by the tests themselves.

One OS process per service (``conclave serve gateway|edge|collector|graph`` and ``conclave worker
collector``) on free loopback ports, against a PostgreSQL schema and a Redis stream prefix of their
own, and a Qdrant-protocol server for semantic memory. Every process reaches PostgreSQL, Redis and
Qdrant through a :class:`~tests.netproxy.CuttableProxy`: cutting one refuses new connections and
drops the established ones, which is what the services see when that server dies; restoring it is
the server coming back on the same address. The proxies run on an event loop of their own (a
thread), so they keep forwarding whatever the test's loop is doing.

A topology is shared by the cases of one module; each case tracks the requests it made and checks
the invariants on those (see docs/faults.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import httpx
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from sqlalchemy import text

from conclave.graph.service import SERVICE_NAME
from conclave.platform.db.engine import create_engine
from conclave.platform.transparency import generate_key
from tests.conftest import POSTGRES_URL, REDIS_URL, isolated_postgres, missing_service
from tests.faults import qdrant_server as qdrant_server_module
from tests.httpserver import free_port, reserved_port
from tests.netproxy import CuttableProxy

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "fault-token"
USER = "fault-user"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
START_TIMEOUT = 60.0
TOOL_TIMEOUT_SECONDS = 5
LEASE_SECONDS = 3

T = TypeVar("T")

HEALTH_NAMES = {
    "gateway": "gateway",
    "edge": "edge",
    "collector": "collector",
    "graph": SERVICE_NAME,
}
"""What each HTTP service calls itself on ``/health``: an answer from another server that got
the port is not taken for the service being up."""


class ProxyLoop:
    """An event loop in a daemon thread hosting the cuttable proxies."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run ``coro`` on the proxy loop and wait for it (from any thread); past ``timeout`` it
        is cancelled, not left running on its own."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the proxy loop and await it from another loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def close(self) -> None:
        """End what still runs on the loop (its sockets closed), then stop it."""
        self.run(_end_tasks())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.loop.close()


async def _end_tasks() -> None:
    # A loop closed with tasks pending leaves their sockets open: each is then reported as an
    # unclosed transport wherever the garbage collector happens to free it.
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


class Outage:
    """A dependency behind a cuttable proxy: ``await outage.cut()`` / ``await outage.restore()``."""

    def __init__(self, loop: ProxyLoop, host: str, port: int) -> None:
        self._loop = loop
        self._proxy = CuttableProxy(host, port)
        loop.run(self._proxy.start())
        self.port = self._proxy.port
        self.down = False

    async def cut(self) -> None:
        await self._loop.arun(self._proxy.cut())
        self.down = True

    async def restore(self) -> None:
        await self._loop.arun(self._proxy.restore())
        self.down = False

    def close(self) -> None:
        self._loop.run(self._proxy.close())


class ServiceProcess:
    """One ``conclave`` command as an OS process; killed with SIGKILL, restarted on its port."""

    def __init__(
        self, name: str, args: list[str], env: dict[str, str], log: Path, port: int | None = None
    ) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.log = log
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.starts += 1
        with self.log.open("ab") as log:
            log.write(f"--- start {self.starts} ---\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "conclave.cli.main", *self.args],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    async def ready(self, timeout: float = START_TIMEOUT) -> None:
        """Wait until ``/health`` answers (any status: a dependency may be down on purpose), or,
        for a worker, until it says it runs."""
        assert self.process is not None
        deadline = asyncio.get_running_loop().time() + timeout
        async with httpx.AsyncClient(timeout=2) as client:
            while asyncio.get_running_loop().time() < deadline:
                if self.process.poll() is not None:
                    raise AssertionError(f"{self.name} exited at start:\n{self.tail()}")
                if self.port is None:
                    if "collector worker" in self.log.read_text(errors="replace"):
                        return
                else:
                    with contextlib.suppress(httpx.TransportError, ValueError):
                        answer = await client.get(self.url + "/health")
                        body = answer.json()
                        if isinstance(body, dict) and body.get("service") == self._health_name:
                            return
                await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name} did not start within {timeout} s:\n{self.tail()}")

    @property
    def _health_name(self) -> str:
        """What the service this runs (``serve <service>``) calls itself on ``/health``."""
        return HEALTH_NAMES[self.args[1]]

    def kill(self) -> None:
        """``kill -9``: no shutdown code runs."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    async def restart(self) -> None:
        self.start()
        await self.ready()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url.replace("+asyncpg", ""))
    try:
        with socket.create_connection((parsed.hostname, parsed.port or default_port), timeout=2):
            return True
    except OSError:
        return False


def _own_environment() -> dict[str, str]:
    # Settings the machine may carry would leak into the services: start from a clean slate.
    prefixes = ("CONCLAVE_", "RELDB_", "BUS_", "GATEWAY_", "COLLECTOR_", "GRAPH_", "EDGE_", "MCP_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


@dataclass
class Topology:
    """The running services, the outages that can be staged, and what the checks need."""

    schema: str
    prefix: str
    data_dir: Path
    postgres: Outage
    redis: Outage
    qdrant: Outage
    services: dict[str, ServiceProcess] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> ServiceProcess:
        return self.services[name]

    def url(self, name: str) -> str:
        return self.services[name].url

    def client(self, name: str, timeout: float = 30) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url(name), headers=AUTH, timeout=timeout)

    def store(self) -> Any:
        """A fresh engine on the topology's schema, straight to PostgreSQL (not the proxy)."""
        return create_engine(POSTGRES_URL, schema=self.schema, pool_size=2)

    def redis_client(self) -> AsyncRedis:
        """A fresh Redis client, straight to the server (not the proxy)."""
        return AsyncRedis.from_url(REDIS_URL, decode_responses=True)

    def stream(self, channel: str) -> str:
        return self.prefix + channel

    async def query(self, sql: str, **params: Any) -> list[Any]:
        engine = self.store()
        try:
            async with engine.connect() as connection:
                return list((await connection.execute(text(sql), params)).all())
        finally:
            await engine.dispose()

    async def entries(self, channel: str) -> list[dict[str, Any]]:
        """Every entry of ``channel``'s stream, its ``payload`` decoded."""
        client = self.redis_client()
        try:
            raw = await client.xrange(self.stream(channel))
        finally:
            await client.aclose()
        return [{**fields, "payload": json.loads(fields["payload"])} for _, fields in raw]


def _through(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parsed = urlparse(url)
    credentials = parsed.netloc.rpartition("@")[0]
    return parsed._replace(netloc=f"{credentials}@127.0.0.1:{port}").geturl()


def _environment(topology: Topology, ports: dict[str, int], qdrant_port: int) -> dict[str, str]:
    return {
        **_own_environment(),
        "CONCLAVE_DATABASE_URL": _through(POSTGRES_URL, topology.postgres.port),
        "CONCLAVE_DATABASE_SCHEMA": topology.schema,
        "CONCLAVE_DATABASE_POOL_SIZE": "4",
        "CONCLAVE_AUTO_MIGRATE": "false",
        "CONCLAVE_BUS_URL": f"redis://127.0.0.1:{topology.redis.port}/0",
        "BUS_STREAM_PREFIX": topology.prefix,
        "BUS_CLAIM_IDLE_SECONDS": "2",
        "CONCLAVE_SEMANTIC_MEMORY_URL": f"http://127.0.0.1:{qdrant_port}",
        "CONCLAVE_DATA_DIR": str(topology.data_dir),
        # On PostgreSQL the gateway's calls log and the edge's packs log need their signer keys
        # (no key is generated there).
        "CONCLAVE_TLOG_SIGNER_KEYS": " ".join(
            generate_key(f"conclave.localhost/{log}")[0] for log in ("calls", "packs")
        ),
        "CONCLAVE_API_TOKENS": f"{TOKEN}={USER}",
        # The fault suite tests outages, not per-user access: its one user is an operator, so
        # reads answer for the whole deployment as they did before collections had owners.
        "CONCLAVE_OPERATORS": USER,
        "CONCLAVE_OUTBOX_POLL_SECONDS": "0.2",
        "CONCLAVE_OUTBOX_MAX_BACKOFF_SECONDS": "0.5",
        "CONCLAVE_LOG_LEVEL": "WARNING",
        "CONCLAVE_LOG_FORMAT": "text",
        "GATEWAY_PORT": str(ports["gateway"]),
        "GATEWAY_TOOL_MODULES": "tests.faults.tools",
        "GATEWAY_TOOL_TIMEOUT_SECONDS": str(TOOL_TIMEOUT_SECONDS),
        "GATEWAY_LOAD_ENTRY_POINTS": "false",
        "GATEWAY_EDGE_URL": f"http://127.0.0.1:{ports['edge']}",
        "EDGE_PORT": str(ports["edge"]),
        "EDGE_PARSER_WORKERS": "1",
        "EDGE_FSYNC_BLOBS": "false",
        "COLLECTOR_API_PORT": str(ports["collector"]),
        # The HTTP process accepts and reports; the worker processes run the expeditions.
        "COLLECTOR_RUN_WORKERS": "false",
        "COLLECTOR_WORKER_CONCURRENCY": "2",
        "COLLECTOR_LEASE_SECONDS": str(LEASE_SECONDS),
        "COLLECTOR_MAX_ATTEMPTS": "5",
        "COLLECTOR_POLL_SECONDS": "0.2",
        "COLLECTOR_FILE_ROOTS": str(topology.data_dir),
        "COLLECTOR_LOAD_ENTRY_POINTS": "false",
        "COLLECTOR_EDGE_API_BASE": f"http://127.0.0.1:{ports['edge']}",
        "COLLECTOR_EDGE_API_TOKEN": TOKEN,
        # The fault tests' JSON API listens on loopback: allowed on purpose.
        "CONCLAVE_EGRESS_ALLOW_NETWORKS": "127.0.0.1/32",
        "GRAPH_PORT": str(ports["graph"]),
        "GRAPH_COLLECTOR_URL": f"http://127.0.0.1:{ports['collector']}",
        "GRAPH_COLLECTOR_TOKEN": TOKEN,
        "GRAPH_AUDIT_MONITORING": "true",
        "GRAPH_HEARTBEAT_SECONDS": "1",
    }


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    """PostgreSQL schema, Redis prefix, Qdrant-protocol server, the proxies, the five processes."""
    if not _reachable(POSTGRES_URL, 5432):
        missing_service(f"PostgreSQL not reachable at {POSTGRES_URL}")
    if not _reachable(REDIS_URL, 6379):
        missing_service(f"Redis not reachable at {REDIS_URL}")
    loop = ProxyLoop()
    schema_cm = isolated_postgres()
    data_dir = tmp_path_factory.mktemp("faults")
    qdrant_port = free_port()
    with (data_dir / "qdrant.log").open("wb") as log:
        qdrant_server = qdrant_server_module.start(
            qdrant_port,
            cwd=ROOT,
            env=_own_environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    processes: list[ServiceProcess] = []
    parsed_pg = urlparse(POSTGRES_URL.replace("+asyncpg", ""))
    parsed_redis = urlparse(REDIS_URL)
    outages: list[Outage] = []
    prefix = f"faults:{uuid.uuid4().hex[:12]}:"
    try:
        engine = loop.run(schema_cm.__aenter__())
        schema = loop.run(_search_path(engine))
        postgres = Outage(loop, parsed_pg.hostname or "127.0.0.1", parsed_pg.port or 5432)
        redis = Outage(loop, parsed_redis.hostname or "127.0.0.1", parsed_redis.port or 6379)
        qdrant = Outage(loop, "127.0.0.1", qdrant_port)
        outages = [postgres, redis, qdrant]
        topology = Topology(
            schema=schema,
            prefix=prefix,
            data_dir=data_dir,
            postgres=postgres,
            redis=redis,
            qdrant=qdrant,
        )
        ports = {name: reserved_port() for name in HEALTH_NAMES}
        env = _environment(topology, ports, qdrant.port)
        for name, port in ports.items():
            topology.services[name] = ServiceProcess(
                name, ["serve", name], env, data_dir / f"{name}.log", port
            )
        topology.services["worker"] = ServiceProcess(
            "worker", ["worker", "collector"], env, data_dir / "worker.log"
        )
        processes = list(topology.services.values())
        for process in processes:
            process.start()

        async def all_ready() -> None:
            await qdrant_server_module.ready(qdrant_port, qdrant_server, START_TIMEOUT)
            await asyncio.gather(*(process.ready() for process in processes))

        asyncio.run(all_ready())
        yield topology
    finally:
        for process in processes:
            process.stop()
        qdrant_server.terminate()
        qdrant_server.wait(timeout=10)
        for outage in outages:
            outage.close()
        with contextlib.suppress(Exception):
            loop.run(schema_cm.__aexit__(None, None, None))
        _delete_streams(prefix)
        loop.close()


async def _search_path(engine: Any) -> str:
    async with engine.connect() as connection:
        return str(await connection.scalar(text("SELECT current_schema()")))


def _delete_streams(prefix: str) -> None:
    client = Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
