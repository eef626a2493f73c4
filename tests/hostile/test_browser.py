"""A real browser (Chromium, driven by Playwright) attacking the gateway with authentication off, as
a page its user opens would: a cross-site request it sends without asking, and DNS rebinding.

Chromium resolves the attacker's names to 127.0.0.1 (``--host-resolver-rules``), and the attacker's
pages are served by Playwright's request interception; the requests those pages make go to the
real gateway on a loopback socket. Playwright sees every response, including those the page itself
may not read (``no-cors``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from conclave.gateway.store import mcp_tool_calls
from conclave.platform.runtime import Platform
from tests.chromium import chromium
from tests.conftest import Backend, eventually
from tests.hostile.conftest import build_app, service_settings
from tests.httpserver import running_server

# Chromium's own Private/Local Network Access checks block a public page's requests to loopback;
# Firefox, Safari and older Chromium do not, and a page on the local network is not "public".
# They are turned off so that the test shows what the service itself refuses.
NETWORK_ACCESS_CHECKS = (
    "BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,"
    "PrivateNetworkAccessRespectPreflightResults,LocalNetworkAccessChecks"
)
CALL = '{"tool": "evaluate_expression", "args": {"expression": "6*7"}}'


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """Debian's Chromium, resolving the attacker's names to loopback."""
    async with chromium(
        "--host-resolver-rules=MAP evil.test 127.0.0.1, MAP friend.test 127.0.0.1",
        f"--disable-features={NETWORK_ACCESS_CHECKS}",
    ) as launched:
        yield launched


async def _audit_rows(backend: Backend) -> int:
    async with backend.engine.connect() as connection:
        query = select(func.count()).select_from(mcp_tool_calls)
        return int((await connection.execute(query)).scalar())


async def _page_at(browser: Any, url: str) -> Any:
    """A page whose document at ``url`` is the attacker's (served by interception), and whose
    responses are recorded by status."""
    page = await browser.new_page()
    await page.route(url, lambda route: route.fulfill(content_type="text/html", body="<p>hi</p>"))
    statuses: list[tuple[str, int]] = []
    page.on("response", lambda response: statuses.append((response.url, response.status)))
    await page.goto(url)
    # With interception on, Playwright answers CORS preflights itself: off again, so that the
    # page's requests meet only the browser and the service.
    await page.unroute(url)
    page.statuses = statuses
    return page


async def _status_of(page: Any, path: str) -> int:
    async def seen() -> int:
        found = [status for url, status in page.statuses if url.endswith(path)]
        return found[-1] if found else 0

    return int(await eventually(seen))


async def test_a_web_page_cannot_call_tools_or_read_answers(
    browser: Any, embedded: Backend, tmp_path: Path
) -> None:
    settings = service_settings(
        "gateway",
        tmp_path,
        auto_migrate=False,
        auth="disabled",
        allowed_origins="http://friend.test",
    )
    async with (
        Platform.open(settings, engine=embedded.engine, bus=embedded.bus) as platform,
        running_server(build_app("gateway", settings, platform)) as url,
    ):
        port = int(url.rsplit(":", 1)[1])

        # 1. Any site: a blind cross-site POST (text/plain, no preflight) carries its Origin.
        attacker = await _page_at(browser, "http://attacker.example/")
        await attacker.evaluate(
            "([url, body]) => fetch(url, {method: 'POST', mode: 'no-cors', body})"
            ".catch(() => null)",
            [f"http://127.0.0.1:{port}/execute", CALL],
        )
        assert await _status_of(attacker, "/execute") == 403

        # 2. An allowed origin (it may send, CORS is off): its text/plain body is still no JSON.
        friend = await _page_at(browser, "http://friend.test/")
        await friend.evaluate(
            "([url, body]) => fetch(url, {method: 'POST', mode: 'no-cors', body})"
            ".catch(() => null)",
            [f"http://127.0.0.1:{port}/execute", CALL],
        )
        assert await _status_of(friend, "/execute") == 415
        # ...and a JSON body needs a preflight, which fails: CORS is off.
        blocked = await friend.evaluate(
            "([url, body]) => fetch(url, {method: 'POST', body,"
            " headers: {'Content-Type': 'application/json'}}).then(() => 'read', () => 'blocked')",
            [f"http://127.0.0.1:{port}/execute", CALL],
        )
        assert blocked == "blocked"

        # 3. DNS rebinding: the attacker's page at evil.test:<port>, its name now resolving to
        # 127.0.0.1, calls "its own" origin, which would let it read the answers.
        rebound = await _page_at(browser, f"http://evil.test:{port}/")
        answers = await rebound.evaluate(
            """async (body) => {
                const call = await fetch('/execute', {method: 'POST', body,
                    headers: {'Content-Type': 'application/json'}});
                const tools = await fetch('/tools');
                return [call.status, (await call.json()).code, tools.status];
            }""",
            CALL,
        )
        assert answers == [421, "HOST_NOT_ALLOWED", 421]

        await asyncio.sleep(0.3)
        assert await _audit_rows(embedded) == 0, "a page made a tool call"
        # The same call from a client that is not a browser page runs.
        async with httpx.AsyncClient(base_url=url) as client:
            response = await client.post(
                "/execute", content=CALL, headers={"Content-Type": "application/json"}
            )
        assert response.json()["result"] is not None
        assert await _audit_rows(embedded) == 1
