"""The Expeditions and Graph pages driven from Debian's Chromium: sign in through the form,
trigger a file discovery and watch its progress reach 100 % on its page (htmx polling under the
console's content security policy), cancel a running expedition with its button, and dispatch a
graph query."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chromium import chromium
from tests.collector.conftest import JsonApi
from tests.conftest import Backend
from tests.console.conftest import TOKENS, Stack, auth, open_stack
from tests.console.test_expeditions import FILE_SOURCES, ITEMS
from tests.console.test_in_chromium import SCREENSHOTS

SLOW_PAGES = 300
"""Pages the slow external API serves, one item each, 0.3 s apiece: a run that lasts minutes
unless it is cancelled."""


@pytest.fixture
async def slow_api() -> AsyncIterator[JsonApi]:
    """An external JSON API we do not own, slow enough to keep an expedition running."""
    async with JsonApi([[{"id": f"p{i}"}] for i in range(SLOW_PAGES)], delay=0.3) as api:
        yield api


@pytest.fixture
async def working_stack(embedded: Backend, tmp_path: Path) -> AsyncIterator[Stack]:
    """The services and the console; the collector runs its workers, reads files from
    ``<tmp_path>/inbox`` and may reach the slow API on this machine."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "items.jsonl").write_text(ITEMS)
    collector = {
        "run_workers": True,
        "poll_seconds": 0.05,
        "worker_concurrency": 1,
        # The lease's heartbeat is what notices a cancel: a short lease frees the worker soon.
        "lease_seconds": 3.0,
        "egress_allow_networks": ["127.0.0.1/32"],
    }
    async with open_stack(embedded, tmp_path, per_service={"collector": collector}) as running:
        yield running


async def test_trigger_follow_cancel_and_dispatch_in_chromium(
    working_stack: Stack, slow_api: JsonApi
) -> None:
    stack = working_stack
    refused: list[str] = []
    async with chromium() as browser:
        context = await browser.new_context()
        page = await context.new_page()
        page.on("console", lambda message: _keep_policy_errors(message, refused))

        await page.goto(stack.console + "/signin")
        await page.fill("#token", TOKENS["alice"])
        await page.click("button:has-text('Sign in')")
        # The form's POST carries the page's own Origin (the referrer policy is same-origin:
        # under no-referrer Chromium sends "null", which the request guard refuses).
        await page.wait_for_url("**/overview")

        # A slow expedition first: it holds the collector's only worker.
        await page.click("nav >> text=Expeditions")
        await page.click("text=Trigger an expedition")
        await page.fill("#x-collections", "slow")
        source = slow_api.source()
        source["max_pages"] = SLOW_PAGES
        await page.fill("#x-sources", json.dumps([source]))
        await page.click("button:has-text('Trigger')")
        await page.wait_for_url("**/expeditions/*")
        slow_id = page.url.rsplit("/", 1)[1]
        await page.wait_for_selector("#expedition-live[data-status='running']", timeout=30_000)

        # A file discovery, triggered in a second tab: queued behind the slow one.
        follow = await context.new_page()
        follow.on("console", lambda message: _keep_policy_errors(message, refused))
        await follow.goto(stack.console + "/expeditions/new")
        await follow.select_option("#x-type", "discovery")
        await follow.fill("#x-collections", "things")
        await follow.select_option("#x-priority", "high")
        await follow.fill("#x-sources", FILE_SOURCES)
        await follow.click("button:has-text('Trigger')")
        await follow.wait_for_url("**/expeditions/*")
        discovery_id = follow.url.rsplit("/", 1)[1]
        assert await follow.get_attribute("#expedition-live", "data-status") == "queued"
        assert await follow.text_content("[data-field='progress']") == "0 %"
        assert await follow.locator("text=Cancel expedition").is_visible()

        # Cancel the slow one with its page's button; the worker turns to the discovery, and
        # its page, polling, follows it to the end without a reload.
        await page.click("text=Cancel expedition")
        await page.wait_for_selector("#expedition-live[data-status='cancelled']")
        assert not await page.locator("text=Cancel expedition").is_visible()
        await follow.wait_for_selector("#expedition-live[data-status='completed']", timeout=60_000)
        assert await follow.text_content("[data-field='progress']") == "100 %"
        # The Cancel button went with the last poll.
        await follow.wait_for_selector("#expedition-actions", state="hidden")
        await _shot(follow, "expedition")
        agents = await follow.text_content("[data-field='agents']")
        assert agents is not None and "binder" in agents.split(", ")
        await follow.close()

        # The history lists both, as the collector stored them.
        await page.goto(stack.console + "/expeditions")
        for expedition_id, status in ((discovery_id, "completed"), (slow_id, "cancelled")):
            row = page.locator(f"tr[data-expedition='{expedition_id}']")
            assert await row.locator(".badge").text_content() == status
        await _shot(page, "expeditions")
        await page.click("nav >> text=Collections")
        await page.wait_for_selector("text=things")
        await _shot(page, "collections")

        # The graph's playground and heartbeat.
        await page.click("nav >> text=Graph")
        await page.fill("#g-query", "search for whales")
        await page.fill("#g-entities", "a1\nb2")
        await page.click("button:has-text('Dispatch')")
        await page.wait_for_selector("#dispatch-answer")
        route = await page.text_content("[data-field='route']")
        assert route and route.strip()
        assert await page.text_content("[data-field='graph-status']") == "healthy"
        count = await page.text_content("[data-field='heartbeat-count']")
        assert count is not None and count.isdigit()
        await _shot(page, "graph")
        await page.close()

    assert refused == []
    async with httpx.AsyncClient(base_url=stack.urls["collector"]) as client:
        stored = await client.get(f"/expedition/status/{slow_id}", headers=auth("alice"))
        assert stored.json()["status"] == "cancelled"
        done = await client.get(f"/expedition/status/{discovery_id}", headers=auth("alice"))
        assert done.json()["progress"]["fraction"] == 1.0
    # Cancelled long before its last page.
    assert slow_api.requests < SLOW_PAGES


async def _shot(page: Any, name: str) -> None:
    """Save the screen for docs/console.md when ``CONCLAVE_CONSOLE_SCREENSHOTS`` names a folder
    (``scripts/console-screenshots``)."""
    if SCREENSHOTS:
        await page.screenshot(path=f"{SCREENSHOTS}/{name}.png", full_page=True)


def _keep_policy_errors(message: Any, refused: list[str]) -> None:
    """Note what the browser refused under the content security policy (an inline style or
    script would be)."""
    if message.type == "error" and "Content Security Policy" in message.text:
        refused.append(message.text)
