"""Rate limits (per user, per tool; shared through Redis), argument size and concurrency caps."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conclave.gateway.app import create_app
from conclave.gateway.tools import Tool, ToolContext
from conclave.platform.ratelimit import MemoryRateLimiter, Rate
from tests.conftest import REDIS_URL, Backend, open_platform, serve_app, test_settings
from tests.gateway.conftest import GatewayClient, audit_rows

ECHO = {"tool": "echo", "args": {"message": "hi"}}


async def test_user_rate_limit_answers_429_with_retry_after(
    backend: Backend, gateway: GatewayClient
):
    async with gateway(user_rate_limit="3/60") as client:
        answers = [await client.post("/execute", json=ECHO) for _ in range(4)]
        assert [a.status_code for a in answers] == [200, 200, 200, 429]
        refused = answers[-1]
        assert refused.json()["code"] == "RATE_LIMITED"
        assert 1 <= int(refused.headers["Retry-After"]) <= 20
        other_user = await client.post("/execute", json={**ECHO, "user_id": "someone-else"})
        assert other_user.status_code == 200  # buckets are per user
        assert len(await audit_rows(backend)) == 4  # the refused call never entered the chain


async def _sleepy(_args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    await asyncio.sleep(0.3)
    return {"done": True}


LIMITED = (
    Tool(
        name="scarce",
        description="Two calls, then one per minute.",
        executor=_sleepy,
        rate_limit=Rate(per_second=1 / 60, burst=2),
    ),
    Tool(name="single", description="One at a time.", executor=_sleepy, max_concurrency=1),
)


async def test_tool_rate_limit_and_concurrency_cap(backend: Backend):
    settings = test_settings()
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform, extra_tools=LIMITED)
        async with serve_app(app) as client:
            codes = [
                (await client.post("/execute", json={"tool": "scarce", "args": {}})).status_code
                for _ in range(3)
            ]
            assert codes == [200, 200, 429]

            both = await asyncio.gather(
                client.post("/execute", json={"tool": "single", "args": {}}),
                client.post("/execute", json={"tool": "single", "args": {}}),
            )
            assert sorted(r.status_code for r in both) == [200, 429]
            busy = next(r for r in both if r.status_code == 429)
            assert busy.json()["code"] == "TOOL_BUSY"
            assert busy.headers["Retry-After"] == "1"


async def test_rate_limit_is_shared_by_replicas_through_redis(
    postgres_engine, redis_bus, redis_prefix, redis_client
):
    backend = Backend("production", postgres_engine, redis_bus)
    settings = test_settings(
        user_rate_limit="4/60", bus_url=REDIS_URL, bus_stream_prefix=redis_prefix
    )
    async with (
        open_platform(backend, settings) as one,
        open_platform(backend, settings) as two,
        serve_app(create_app(settings, platform=one)) as first,
        serve_app(create_app(settings, platform=two)) as second,
    ):
        codes = []
        for client in (first, second, first, second, first, second):
            codes.append((await client.post("/execute", json=ECHO)).status_code)
        assert codes == [200, 200, 200, 200, 429, 429]
    assert await redis_client.exists(f"{redis_prefix}ratelimit:user:anonymous")


@pytest.mark.parametrize("text", ["0/60", "x/1", "5/0"])
def test_bad_rate_specifications_are_refused(text: str):
    with pytest.raises(ValueError):
        Rate.parse(text)


def test_rate_specification():
    assert Rate.parse("") is None
    assert Rate.parse("600/60") == Rate(per_second=10.0, burst=600)
    assert Rate.parse("5/1:20") == Rate(per_second=5.0, burst=20)


async def test_the_in_memory_limiter_forgets_refilled_buckets_and_keeps_the_rest():
    """Keys that each come once (a service acting for many users) must not grow the process's
    memory for good; a bucket still limiting its key is kept."""
    limiter = MemoryRateLimiter(max_idle_buckets=100)
    slow, fast = Rate(per_second=1 / 3600, burst=1), Rate(per_second=1e6, burst=1)
    assert await limiter.acquire("held", slow) == 0.0
    for n in range(5_000):
        await limiter.acquire(f"user-{n}", fast)  # refilled a microsecond later
    assert len(limiter._buckets) <= 200
    assert await limiter.acquire("held", slow) > 3000  # still limited: not forgotten
