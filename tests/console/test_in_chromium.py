"""The console in a real browser: Debian's Chromium, driven by Playwright.

A person signs in through the form, looks at the overview until it has refreshed itself, searches
the audit trail and opens a call; another person cannot see it; an operator can. Every page is
checked for what the browser refused to run (the content security policy) and for scripts that
failed. With ``CONCLAVE_CONSOLE_SCREENSHOTS`` set to a folder, each screen is saved there
(``scripts/console-screenshots`` makes docs/console/'s pictures this way).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.chromium import chromium
from tests.conftest import Backend
from tests.console.conftest import TOKENS, Stack, open_stack

SCREENSHOTS = os.environ.get("CONCLAVE_CONSOLE_SCREENSHOTS")


# One stack and one Chromium for the module, on its event loop; each test signs in in a browser
# context of its own. Only the second test makes calls, so its lists are exactly its own.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def live_stack(
    shared_embedded: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """The four services and a console whose overview refreshes every second."""
    data_dir = tmp_path_factory.mktemp("live-stack")
    async with open_stack(shared_embedded, data_dir, poll_seconds=1.0) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Any]:
    async with chromium() as launched:
        yield launched


class Watched:
    """A page whose browser-side failures are collected: console errors (a refused script or
    style shows there) and uncaught exceptions."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.failures: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.failures.append(f"pageerror: {error}"))

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.failures.append(f"console: {message.text}")

    async def shot(self, name: str) -> None:
        if SCREENSHOTS:
            # Playwright makes the folder.
            await self.page.screenshot(path=f"{SCREENSHOTS}/{name}.png", full_page=True)


async def sign_in(browser: Any, console: str, user: str, width: int = 1280) -> Watched:
    """A fresh browser context (its own cookies) signed in as ``user`` through the form."""
    context = await browser.new_context(viewport={"width": width, "height": 900})
    watched = Watched(await context.new_page())
    page = watched.page
    await page.goto(f"{console}/calls")
    assert page.url.startswith(f"{console}/signin?next=/calls")
    await watched.shot("signin")
    await page.get_by_label("Bearer token or JWT").fill(TOKENS[user])
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{console}/calls")
    return watched


async def test_overview_refreshes_itself_and_draws_rates(browser: Any, live_stack: Stack) -> None:
    watched = await sign_in(browser, live_stack.console, "olga")
    page = watched.page
    await page.get_by_role("link", name="Overview").click()
    await page.wait_for_url(f"{live_stack.console}/overview")
    rows = page.locator("#services tbody tr")
    assert await rows.count() == 4
    assert await page.locator("#services .badge.healthy").count() == 4
    first = await page.locator("#services").get_attribute("data-sampled-at")
    # The fragment replaces itself (htmx) and the script draws a rate from two samples.
    await page.wait_for_function(
        "(first) => document.querySelector('#services').dataset.sampledAt !== first", arg=first
    )
    gateway_rate = page.locator("[data-chart-for=gateway] [data-rate=requests]")
    await page.wait_for_function(
        "() => document.querySelector('[data-chart-for=gateway] [data-rate=requests]')"
        ".textContent !== '\\u2013'"  # the en dash shown before two samples exist
    )
    assert float(await gateway_rate.text_content() or "nan") >= 0
    await watched.shot("overview")
    assert watched.failures == []
    await page.context.close()  # the browser is the module's: its polling ends here


async def test_a_user_searches_their_calls_and_cannot_see_anothers(
    browser: Any, live_stack: Stack
) -> None:
    mine = await live_stack.call_tool("alice", "evaluate_expression", {"expression": "6*7"})
    failed = await live_stack.call_tool("alice", "echo", {"message": 42})
    theirs = await live_stack.call_tool("bob", "echo", {"message": "bob's secret"})

    alice = await sign_in(browser, live_stack.console, "alice")
    page = alice.page
    listed = page.locator("tr[data-call]")
    assert {await row.get_attribute("data-call") for row in await listed.all()} == {
        mine["conclave_id"],
        failed["conclave_id"],
    }
    assert "bob" not in await page.locator("table.calls").inner_text()
    await alice.shot("calls")

    # Filter with the form, by keyboard-reachable labelled fields.
    await page.get_by_label("Orthodoxy").select_option("heretical")
    await page.get_by_role("button", name="Search").click()
    await page.wait_for_url("**/calls?**orthodoxy_status=heretical**")
    assert await listed.count() == 1
    assert await listed.first.get_attribute("data-call") == failed["conclave_id"]
    await page.get_by_role("link", name="Clear").click()

    # Open a call: its arguments, result and verification status.
    await page.locator(f"tr[data-call='{mine['conclave_id']}'] a").click()
    await page.wait_for_url(f"**/calls/{mine['conclave_id']}")
    await page.get_by_role("heading", name="Transparency log").wait_for()
    body = await page.locator("main").inner_text()
    assert "6*7" in body and "42" in body and "blessed" in body
    if "Verified" not in body:  # signed within a checkpoint interval (0.2 s here)
        await page.reload()
    assert "Verified: the audit row is unchanged" in await page.locator("main").inner_text()
    await alice.shot("call")

    # Bob's call by its address: the gateway's refusal, as a page, nothing of bob's on it.
    await page.goto(f"{live_stack.console}/calls/{theirs['conclave_id']}")
    alert = page.get_by_role("alert")
    assert "Call not found" in await alert.inner_text()
    assert "bob's secret" not in await page.content()
    await alice.shot("problem")
    assert [failure for failure in alice.failures if "404" not in failure] == []

    # Sign out ends it: the audit trail asks for a sign-in again.
    await page.get_by_role("button", name="Sign out").click()
    await page.wait_for_url(f"{live_stack.console}/signin")
    await page.goto(f"{live_stack.console}/calls")
    assert "/signin" in page.url

    # The operator sees both users' calls, in a narrow window too.
    olga = await sign_in(browser, live_stack.console, "olga", width=420)
    users = await olga.page.locator("table.calls tbody td:nth-child(3)").all_inner_texts()
    assert set(users) == {"alice", "bob"}
    await olga.shot("calls-narrow")
    assert olga.failures == []
    for context in (alice.page.context, olga.page.context):
        await context.close()
