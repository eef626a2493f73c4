"""The Tools page and the playground in real Chromium: sign in through the form, run a tool from
its generated form, follow the outcome to its audit row, and see the gateway's refusal. With
``CONCLAVE_CONSOLE_SCREENSHOTS`` set, the screens are saved (``scripts/console-screenshots``)."""

from __future__ import annotations

import re

import pytest

from tests.chromium import chromium
from tests.console.conftest import TOKENS, Stack
from tests.console.test_in_chromium import SCREENSHOTS, Watched
from tests.console.test_tools import tools_stack as tools_stack  # the fixture, for this test too

# The imported stack is module-scoped: it and the test share the module's event loop.
pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_run_a_tool_from_its_form_and_follow_it_to_the_audit_row(tools_stack: Stack) -> None:
    from playwright.async_api import expect

    async with chromium() as browser:
        context = await browser.new_context(viewport={"width": 1280, "height": 900})
        watched = Watched(await context.new_page())
        page = watched.page
        await page.goto(tools_stack.console + "/")
        await page.fill("#token", TOKENS["alice"])
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_role("heading", name="Overview")).to_be_visible()

        await page.get_by_role("link", name="Tools", exact=True).click()
        await expect(page.get_by_role("heading", name="Tools", exact=True)).to_be_visible()
        if SCREENSHOTS:  # the top of the catalogue: the whole page is long
            await page.screenshot(path=f"{SCREENSHOTS}/tools.png")
        await page.get_by_role("link", name="Open evaluate_expression in the playground").click()
        expression = page.get_by_role("textbox", name=re.compile(r"^expression\b"))
        await expression.fill("6*7")
        await page.get_by_role("button", name="Run evaluate_expression").click()
        outcome = page.locator("#outcome")
        await expect(outcome.locator(".badge.succeeded")).to_have_text("succeeded")
        await expect(outcome.locator(".badge.blessed")).to_have_text("blessed")
        await expect(outcome.locator("pre")).to_contain_text('"value": 42')
        await expect(expression).to_have_value("6*7")  # kept for the next run
        await watched.shot("playground")

        await outcome.get_by_role("link", name=re.compile(r"^call ")).click()
        await expect(page).to_have_url(re.compile(r"/calls/[0-9a-f-]+$"))
        main = page.locator("main")
        await expect(main.locator("h1")).to_contain_text("evaluate_expression")
        await expect(main).to_contain_text('"expression": "6*7"')
        await expect(main.locator(".badge.blessed")).to_be_visible()

        await page.get_by_role("link", name="Tools", exact=True).click()
        await page.get_by_role("link", name="Open echo in the playground").click()
        await page.get_by_text("Edit as raw JSON").click()
        await page.get_by_label("Arguments (a JSON object)").fill('{"message": 42}')
        await page.get_by_role("button", name="Run with these arguments").click()
        await expect(outcome).to_contain_text("VALIDATION_FAILED")
        await expect(outcome).to_contain_text('42 is not of type "string"')
        await expect(outcome.locator(".badge.heretical")).to_be_visible()
        await expect(outcome.get_by_role("link", name=re.compile(r"^call "))).to_be_visible()
        await watched.shot("playground-refused")

        # Bad JSON never leaves the console: the problem is shown at the field.
        await page.get_by_label("Arguments (a JSON object)").fill('{"message": ')
        await page.get_by_role("button", name="Run with these arguments").click()
        await expect(page.locator("#raw-problem")).to_contain_text("Not JSON")
        await expect(page.get_by_role("alert")).to_contain_text("nothing was sent")
        await expect(page.locator("#outcome")).to_have_count(0)
        # Nothing the browser refused to run (the content security policy), no script failure;
        # the two refusals' pages are answered 422, which Chromium logs as a failed load.
        failures = [text for text in watched.failures if "Failed to load resource" not in text]
        assert failures == [], watched.failures
