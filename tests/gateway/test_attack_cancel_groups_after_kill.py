"""Attack test of ccdbef3: the relay's per-process consumer groups on ``conclave.mcp.cancel``
when a gateway process is killed (kill -9, an OOM kill, Kubernetes' SIGKILL after its grace
period) instead of stopping."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.gateway.mcp_cancel_relay import CHANNEL, GROUP_PREFIX
from conclave.platform.bus.redis_streams import RedisStreamsBus
from tests.conftest import REDIS_URL, Backend, eventually
from tests.gateway.test_attack_mcp_cancel_relay import Naps, replicas
from tests.httpserver import free_port

ROOT = Path(__file__).resolve().parents[2]


def _clean_environment() -> dict[str, str]:
    prefixes = ("CONCLAVE_", "RELDB_", "BUS_", "GATEWAY_", "COLLECTOR_", "GRAPH_", "EDGE_", "MCP_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


async def _groups(redis: Redis, key: str) -> list[str]:
    try:
        return [g["name"] for g in await redis.xinfo_groups(key)]
    except Exception:
        return []


async def test_a_killed_gateways_cancel_group_is_not_left_in_redis_for_ever(
    postgres_engine: AsyncEngine,
    redis_bus: RedisStreamsBus,
    redis_client: Redis,
    redis_prefix: str,
    tmp_path: Path,
) -> None:
    """A gateway process is killed (SIGKILL) and replaced, as an orchestrator does; the other
    replicas run on (here: one of them, for several reclaim idle times, relaying cancellations).

    An operator notices the killed process's consumer group
    ``gateway-cancel:<host>:<pid>:<random>`` on the stream ``conclave.mcp.cancel`` for ever: one
    more per crash or forced kill, each with a lag that only grows (every later cancellation is
    counted in it) and whatever it had pending. Nothing ever removes them (docs: "every gateway
    process reads that channel through a consumer group of its own (dropped when it stops)");
    every replica's lag probe reads ``XINFO GROUPS`` of the stream every 15 s, which lists them
    all.

    Why: the group is dropped only by ``Listener.stop`` (``drop_group_on_stop``,
    platform/listener.py), which a killed process never runs, and its name is new for every
    process (``CancelRelay.__init__``, gateway/mcp_cancel_relay.py: host, pid and a random
    suffix), so no successor takes it over. Fix: read the broadcast without a consumer group
    (``XREAD`` from ``$``), or have live replicas destroy ``gateway-cancel:`` groups whose
    consumers have been idle for longer than a few reclaim idle times (``BUS_CLAIM_IDLE_SECONDS``;
    a live consumer blocks in ``XREADGROUP`` every second)."""
    port = free_port()
    env = {
        **_clean_environment(),
        "CONCLAVE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}",
        "CONCLAVE_AUTO_MIGRATE": "true",
        "CONCLAVE_AUTH": "disabled",
        "CONCLAVE_BUS_URL": REDIS_URL,
        "BUS_STREAM_PREFIX": redis_prefix,
        "BUS_CLAIM_IDLE_SECONDS": "0.5",
        "CONCLAVE_DATA_DIR": str(tmp_path),
        "CONCLAVE_LOG_LEVEL": "WARNING",
        "GATEWAY_PORT": str(port),
        "GATEWAY_LOAD_ENTRY_POINTS": "false",
    }
    key = redis_bus.key(CHANNEL)
    log = (tmp_path / "gateway.log").open("wb")
    process = subprocess.Popen(  # noqa: ASYNC220 (started once, not waited on)
        [sys.executable, "-m", "conclave.cli.main", "serve", "gateway"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        killed: list[str] = []
        while not killed:
            assert process.poll() is None, (tmp_path / "gateway.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the gateway did not start"
            killed = [g for g in await _groups(redis_client, key) if g.startswith(GROUP_PREFIX)]
            await asyncio.sleep(0.2)
        async with httpx.AsyncClient(timeout=10) as http:  # it serves
            assert (await http.get(f"http://127.0.0.1:{port}/health")).status_code < 500
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        log.close()

    backend = Backend("production", postgres_engine, redis_bus)
    async with replicas(backend, Naps(1).tool(), 1):
        await asyncio.sleep(3.0)  # the killed group idles; the live replica's group is made
        live = [g for g in await _groups(redis_client, key) if g not in killed]
        # What every gateway's relay does at start and every few minutes (idle past 300 s there).
        # Before Redis 7.2 a consumer blocked on a silent stream looks idle too: a live group may
        # go as well, and its consumer makes it again at its next read (within a second).
        dropped = await redis_bus.drop_idle_groups(CHANNEL, GROUP_PREFIX, 2.0)
        gone = await _groups(redis_client, key)

        async def live_again() -> bool:
            now = await _groups(redis_client, key)
            return all(group in now for group in live)

        await eventually(live_again, timeout=30)
        left = await _groups(redis_client, key)

    assert dropped >= 1 and killed[0] not in gone
    assert killed[0] not in left, f"the killed gateway's group is back: {left}"
    assert live and all(group in left for group in live)  # a live replica keeps reading
