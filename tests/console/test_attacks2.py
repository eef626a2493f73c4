"""The second outside attacker's findings on the operator console: each test asserts what a correct
console does, and fails on the console as it stands (services' findings are in
``tests/<service>/test_attacks_console_round2.py``)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from tests.conftest import Backend
from tests.console.conftest import TOKENS, Stack, open_stack
from tests.console.test_pages import session_csrf, signed_in

HOSTILE_TOOLS = "tests.console.attack2_tools"
FORM_SHAPES = "tests.console.playground_tools"
WIDE_TOOLS = "tests.console.attack2_wide_tools"
DEEP_TOOLS = "tests.console.attack2_deep_tools"


# The module's tests run on its event loop: the two playground tests share one gateway with the
# hostile tools; the others start the catalogue (or the production store) they are about.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def hostile_tools(
    shared_embedded: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """The gateway with tools whose schemas are hostile, and the console."""
    data_dir = tmp_path_factory.mktemp("hostile-tools")
    async with open_stack(
        shared_embedded, data_dir, services=("gateway",), tool_modules=(HOSTILE_TOOLS, FORM_SHAPES)
    ) as running:
        yield running


async def test_a_tool_schema_with_a_huge_integer_bound_still_opens_its_playground(
    hostile_tools: Stack,
) -> None:
    # Impact: one tool in the catalogue (a plug-in, or an HTTP tool catalogue the gateway reads)
    # whose schema has a bound of 401 digits makes `math.isfinite` raise OverflowError in the
    # form builder: its playground is a 500 for everyone, instead of a form (the bound left out)
    # or at least the raw JSON editor.
    async with signed_in(hostile_tools, TOKENS["alice"]) as alice:
        catalogue = await alice.get("/tools")
        assert catalogue.status_code == 200 and "huge_bound" in catalogue.text
        playground = await alice.get("/tools/huge_bound")
        assert playground.status_code == 200, playground.text[:300]
        assert 'name="raw"' in playground.text  # the raw JSON editor, at least


async def test_a_small_playground_form_does_not_make_a_page_of_megabytes(
    hostile_tools: Stack,
) -> None:
    # Impact: the playground echoes the arguments as `json.dumps(arguments, indent=2)`, whatever
    # their shape (web.py's pretty_json knows to go compact past 20,000 characters; this does
    # not). Indentation grows with depth, so a JSON field nested 900 deep (the parser takes up
    # to its recursion limit) with a list inside costs depth x items: 12 KB typed gives a page
    # of about 9 MB, built in pure Python on the event loop; at the 1 MB body limit it is
    # hundreds of megabytes per request, from any signed-in user.
    depth, items = 900, 5_000
    nested = "[" * depth + ",".join(["0"] * items) + "]" * depth
    async with signed_in(hostile_tools, TOKENS["alice"]) as alice:
        csrf = session_csrf((await alice.get("/tools/form_shapes")).text)
        # form_shapes's fields in schema order: arg-1 label, arg-10 size.width, arg-12 tags.
        form = {"csrf_token": csrf, "arg-1": "x", "arg-10": "1", "arg-12": nested}
        answer = await alice.post("/tools/form_shapes", data=form)
    assert len(answer.content) < 1_000_000, (
        f"{len(nested):,} characters typed, {len(answer.content):,} bytes answered"
    )


@pytest.fixture
async def wide_catalogue(embedded: Backend, tmp_path: Path) -> AsyncIterator[Stack]:
    """The gateway with 15 tools of 500 parameters each (about 0.7 MB of catalogue)."""
    async with open_stack(
        embedded, tmp_path, services=("gateway",), tool_modules=(WIDE_TOOLS,)
    ) as running:
        yield running


@pytest.mark.asyncio(loop_scope="function")  # its own catalogue, for this test only
async def test_the_tools_page_of_a_large_catalogue_does_not_stall_every_other_page(
    wide_catalogue: Stack,
) -> None:
    # Impact: GET /tools makes a table of every property of every tool's input *and* output
    # schema (500 rows each, 1,000 per tool, no bound across the catalogue) and renders them
    # all in one synchronous Jinja pass on the event loop. For a 2.4 MB catalogue that is an
    # 11 MB page and over a second during which the console answers nobody; any signed-in user
    # can ask for it again and again. A page that costs what it shows (a list, each tool's
    # schema on its own page) would not. Here 15 such tools (0.7 MB) are enough: 3.4 MB of page
    # without a bound (see attack2_wide_tools.py).
    async with signed_in(wide_catalogue, TOKENS["alice"]) as alice:
        listing = asyncio.create_task(alice.get("/tools", timeout=120))
        # The console runs on this test's event loop: a gap between two ticks of this loop is
        # time in which the console could answer no one.
        # In this thread's CPU time: the work that held the loop, not the waits for a core
        # (under xdist on a loaded machine these alone can pass half a second).
        ticks = [time.thread_time()]
        while not listing.done():
            await asyncio.sleep(0.01)
            ticks.append(time.thread_time())
        tools = await listing
    assert tools.status_code == 200
    stall = max(later - earlier for earlier, later in pairwise(ticks))
    assert stall < 0.5, f"the console answered no one for {stall:.1f} s while building /tools"
    assert len(tools.content) < 2_500_000, f"{len(tools.content):,} bytes of page"


@pytest.mark.asyncio(loop_scope="function")  # the production store and bus, for this test only
async def test_many_dead_letters_do_not_empty_the_dead_letters_page(
    postgres_engine: Any, redis_bus: Any, redis_client: Redis, redis_prefix: str, tmp_path: Path
) -> None:
    # Impact: each service lists up to 100 entries of up to 50 channels, each payload preview
    # up to 4,096 characters, JSON-escaped again in the answer; the console reads at most 16 MB
    # of any answer. Twenty-five channels of 100 rejected events whose payloads hold quotes (each
    # previewed character escaped twice) pass that limit, and the four services share the bus:
    # every one of them is "an answer too large to show" and the page lists no dead letter at
    # all, on the day an operator most needs it. The page should show a bounded first page.
    payload = json.dumps({"quoted": '"' * 5000})
    for channel in range(25):
        for number in range(100):
            await redis_client.xadd(
                f"{redis_prefix}ops.test.c{channel}.dlq",
                {"event_id": f"e-{channel}-{number}", "source": "s", "payload": payload},
            )
    backend = Backend("production", postgres_engine, redis_bus)
    async with (
        open_stack(backend, tmp_path) as running,
        signed_in(running, TOKENS["olga"]) as olga,
    ):
        listed = await olga.get("/dead-letters", timeout=60)
    assert listed.status_code == 200
    warnings = re.findall(r"did not list its dead letters: ([^<]*)", listed.text)
    assert not warnings, warnings
    assert listed.text.count("data-entry=") >= 100


@pytest.fixture
async def deep_catalogue(embedded: Backend, tmp_path: Path) -> AsyncIterator[Stack]:
    """The gateway with 40 tools whose schemas are small but nested 60 deep."""
    async with open_stack(
        embedded, tmp_path, services=("gateway",), tool_modules=(DEEP_TOOLS,)
    ) as running:
        yield running


@pytest.mark.asyncio(loop_scope="function")  # its own catalogue, for this test only
async def test_pretty_printing_a_small_deep_schema_is_cheap(deep_catalogue: Stack) -> None:
    # Impact: pretty_json indents any document whose *compact* form is under 20,000 characters,
    # but indentation costs depth x lines: 6,400 zeros inside 200 nested lists (under 20 KB)
    # indent to about 2.6 MB, built in pure Python before the 200,000-character cut. The Tools
    # page pretty-prints every tool's input schema, so a 540 KB catalogue of 40 such tools
    # makes an 8 MB page and holds the console's event loop for about 2 s per look, for any
    # signed-in user. The same filter shows call arguments and results, records, metadata.
    async with signed_in(deep_catalogue, TOKENS["alice"]) as alice:
        listing = asyncio.create_task(alice.get("/tools", timeout=120))
        # In this thread's CPU time: the work that held the loop, not the waits for a core
        # (under xdist on a loaded machine these alone can pass half a second).
        ticks = [time.thread_time()]
        while not listing.done():
            await asyncio.sleep(0.01)
            ticks.append(time.thread_time())
        tools = await listing
    assert tools.status_code == 200
    stall = max(later - earlier for earlier, later in pairwise(ticks))
    assert stall < 0.5, f"the console answered no one for {stall:.1f} s while building /tools"
