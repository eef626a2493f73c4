"""The second outside attacker's findings on what the console round added to every service
(here through the gateway): ``GET /dead-letters`` and its actions. Each test asserts what a correct
service does, and fails on the service as it stands."""

from __future__ import annotations

import asyncio
import json
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from conclave.gateway.app import build_registry
from conclave.gateway.plugins import load_module_tools
from tests.conftest import Backend
from tests.hostile.conftest import service_settings
from tests.platform.test_dead_letter_routes import OPERATOR, gateway_of

DEEPER_TOOLS = "tests.gateway.attack2_deeper_tools"


async def test_the_dead_letter_listing_bounds_every_field_not_only_the_payload(
    postgres_engine: Any, redis_bus: Any, redis_client: Redis, redis_prefix: str, tmp_path: Path
) -> None:
    # Impact: the listing cuts each payload at 4,096 characters "so that it is bounded", but the
    # other fields of an entry (event_id, source, the reason) are answered whole. An entry
    # dead-lettered because it was malformed keeps whatever it carried: 20 such entries of 1 MB
    # each make a 20 MB answer per look (the console refuses answers over 16 MB, so the page
    # loses every service sharing that bus).
    for _ in range(20):
        await redis_client.xadd(
            f"{redis_prefix}ops.test.wide.dlq",
            {"event_id": "x" * 1_000_000, "source": "s", "payload": "{}"},
        )
    backend = Backend("production", postgres_engine, redis_bus)
    async with gateway_of(backend, tmp_path) as gateway:
        listed = await gateway.get("/dead-letters", headers=OPERATOR)
        assert listed.status_code == 200
        assert len(listed.content) < 1_000_000, f"{len(listed.content):,} bytes for 20 entries"


async def test_listing_dead_letters_does_not_stall_the_service(
    postgres_engine: Any, redis_bus: Any, redis_client: Redis, redis_prefix: str, tmp_path: Path
) -> None:
    # Impact: to say whether each entry is `replayable`, the listing parses every listed entry's
    # whole payload (json.loads + a walk for unsafe values), synchronously, after reading up to
    # 100 whole entries of up to 50 channels from Redis. The bus takes events of up to 8 MB, and
    # a rejected one is kept whole: 30 rejected 4 MB events make each look at the page (the
    # console asks all four services at once, and they share the bus) hold the gateway's event
    # loop, and with it every governed call, for a second or more.
    payload = json.dumps({"rows": ["x" * 100] * 40_000})  # about 4 MB, a valid event
    for number in range(30):
        await redis_client.xadd(
            f"{redis_prefix}ops.test.large.dlq",
            {"event_id": f"large-{number}", "source": "s", "payload": payload},
        )
    backend = Backend("production", postgres_engine, redis_bus)
    async with gateway_of(backend, tmp_path) as gateway:
        listing = asyncio.create_task(gateway.get("/dead-letters", headers=OPERATOR))
        # In this thread's CPU time: the work that held the loop, not the waits for a core.
        ticks = [time.thread_time()]
        while not listing.done():
            await asyncio.sleep(0.01)
            ticks.append(time.thread_time())
        listed = await listing
    assert listed.status_code == 200
    stall = max(later - earlier for earlier, later in pairwise(ticks))
    assert stall < 0.5, f"the gateway answered no one for {stall:.1f} s while listing"


async def test_dead_letters_are_those_of_this_deployments_prefix_only(
    postgres_engine: Any, redis_bus: Any, redis_client: Redis, redis_prefix: str, tmp_path: Path
) -> None:
    # Impact: BUS_STREAM_PREFIX is what keeps deployments (or tenants, or test runs) sharing one
    # Redis apart. The listing finds dead-letter streams with `SCAN MATCH <prefix>*.dlq`, so a
    # deployment whose prefix is a prefix of another's (the default "" is a prefix of every one)
    # lists the other's dead letters with their payloads, and its operator can replay or
    # discard them: channel "staging:orders" names the key "<prefix>staging:orders", which is
    # the other deployment's stream.
    other = f"{redis_prefix}staging:"  # another deployment on the same Redis
    await redis_client.xadd(
        f"{other}orders.dlq",
        {"event_id": "theirs", "source": "s", "payload": '{"card": "4111 1111 1111 1111"}'},
    )
    backend = Backend("production", postgres_engine, redis_bus)
    async with gateway_of(backend, tmp_path) as gateway:
        listed = await gateway.get("/dead-letters", headers=OPERATOR)
    assert listed.status_code == 200
    assert "4111" not in listed.text, "another deployment's dead letter is listed here"


async def test_one_deep_tool_schema_does_not_take_the_catalogue_down(tmp_path: Path) -> None:
    # Impact: one tool whose schema nests deeper than pydantic's serialisation limit (a plug-in,
    # or an HTTP tool catalogue the gateway reads) made `GET /tools` a 500 for everyone
    # ("Maximum serialization depth exceeded"): the catalogue, MCP tools/list clients and the
    # console's Tools page and playground all lost every tool because of one. Such a tool is
    # now refused when the catalogue is built, naming it, as any invalid schema is (the
    # operator who installs plug-ins fixes it); the catalogue never serves it.
    settings = service_settings("gateway", tmp_path, tool_modules=[DEEPER_TOOLS])
    with pytest.raises(ValueError, match="tool 'deeper': parameters nest deeper than 64 levels"):
        build_registry(settings)
    plain = [tool for tool in load_module_tools(DEEPER_TOOLS) if tool.name == "plain"]
    registry = build_registry(service_settings("gateway", tmp_path), extra=tuple(plain))
    assert "plain" in {tool.name for tool in registry.tools()}


async def test_an_entry_id_past_64_bits_is_not_found_not_a_bus_outage(
    postgres_engine: Any, redis_bus: Any, tmp_path: Path
) -> None:
    # Impact: the route's pattern admits 20-digit entry id parts, which Redis refuses past
    # 2**64 - 1 ("Invalid stream ID"); the bus turns every Redis error into BusUnavailable, so a
    # typo'd or hostile id answers 503 "the bus is not reachable" (and the console shows an
    # outage), where the entry simply does not exist: 404.
    backend = Backend("production", postgres_engine, redis_bus)
    async with gateway_of(backend, tmp_path) as gateway:
        answer = await gateway.post(
            "/dead-letters/bus/ops.test.orders/99999999999999999999-0/discard", headers=OPERATOR
        )
    assert answer.status_code == 404, answer.text
