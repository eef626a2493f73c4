"""The console's pages over HTTP: sign-in, what each user sees, and what it refuses.

The browser tests (``test_in_chromium.py``) drive the same pages from Chromium; these check the
answers a browser would get, including the ones a hostile page or user would provoke.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from conclave.console.app import create_app
from conclave.console.session import COOKIE_NAME
from conclave.settings import ConsoleSettings
from tests.console.conftest import TOKENS, Stack, credential_of, user_jwt
from tests.httpserver import running_server

# One gateway and console for the module's tests: each signs in with a session of its own; a test
# that needs an empty store says so and takes a fresh stack.
pytestmark = pytest.mark.asyncio(loop_scope="module")

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


async def signin_form(client: httpx.AsyncClient, next_path: str = "/") -> str:
    """Open the sign-in form; its CSRF token."""
    form = await client.get("/signin", params={"next": next_path})
    assert form.status_code == 200, form.text
    found = CSRF.search(form.text)
    assert found is not None, form.text
    return found.group(1)


@asynccontextmanager
async def signed_in(stack: Stack, credential: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the console with a session for ``credential``."""
    async with httpx.AsyncClient(base_url=stack.console) as client:
        token = await signin_form(client)
        answer = await client.post("/signin", data={"csrf_token": token, "token": credential})
        assert answer.status_code == 303, answer.text
        assert answer.headers["location"] == "/"
        yield client


def session_csrf(html: str) -> str:
    """The session's CSRF token, from any signed-in page (the sign-out form carries it)."""
    found = CSRF.search(html)
    assert found is not None
    return found.group(1)


def call_ids(html: str) -> set[str]:
    """The calls an audit-trail page lists."""
    return set(re.findall(r'data-call="([^"]+)"', html))


# A fresh stack: the operator's view is checked to be exactly these two calls.
@pytest.mark.asyncio(loop_scope="function")
async def test_a_user_sees_only_their_own_calls_and_an_operator_sees_everyones(
    gateway_stack: Stack,
) -> None:
    alice_call = await gateway_stack.call_tool("alice", "echo", {"message": "from alice"})
    bob_call = await gateway_stack.call_tool("bob", "echo", {"message": "from bob"})
    alice_id, bob_id = alice_call["conclave_id"], bob_call["conclave_id"]

    async with signed_in(gateway_stack, TOKENS["alice"]) as alice:
        listed = await alice.get("/calls")
        assert listed.status_code == 200
        assert call_ids(listed.text) == {alice_id}
        # Naming bob in the filter changes nothing for a user: the field is not even offered.
        assert 'name="user_id"' not in listed.text
        assert call_ids((await alice.get("/calls", params={"user_id": "bob"})).text) == {alice_id}
        own = await alice.get(f"/calls/{alice_id}")
        assert own.status_code == 200 and "from alice" in own.text
        # Bob's call by its id: the gateway's own 404, shown as a page, nothing of bob's in it.
        other = await alice.get(f"/calls/{bob_id}")
        assert other.status_code == 404
        assert "CALL_NOT_FOUND" in other.text and "from bob" not in other.text

    async with signed_in(gateway_stack, TOKENS["olga"]) as olga:
        everyone = await olga.get("/calls")
        assert call_ids(everyone.text) == {alice_id, bob_id}
        assert 'name="user_id"' in everyone.text
        only_bob = await olga.get("/calls", params={"user_id": "bob"})
        assert call_ids(only_bob.text) == {bob_id}
        detail = await olga.get(f"/calls/{bob_id}")
        assert detail.status_code == 200 and "from bob" in detail.text


async def test_filters_and_pages_follow_the_gateways_cursor(shared_gateway_stack: Stack) -> None:
    # A user of its own: the pages list exactly the calls made here.
    stack = shared_gateway_stack
    made = [
        (await stack.call_tool("pager", "echo", {"message": f"m{i}"}))["conclave_id"]
        for i in range(53)
    ]
    failed = await stack.call_tool("pager", "echo", {"message": 42})
    async with signed_in(stack, credential_of("pager")) as pager:
        first = await pager.get("/calls", params={"tool": "echo", "status": "succeeded"})
        shown = call_ids(first.text)
        assert len(shown) == 50 and failed["conclave_id"] not in shown
        link = re.search(r'<a rel="next" href="([^"]+)"', first.text)
        assert link is not None
        second = await pager.get(link.group(1).replace("&amp;", "&"))
        rest = call_ids(second.text)
        assert shown | rest == set(made) and not shown & rest
        assert 'rel="next"' not in second.text  # the last page offers no next page
        rejected = await pager.get("/calls", params={"orthodoxy_status": "heretical"})
        assert call_ids(rejected.text) == {failed["conclave_id"]}
        # A filter the gateway refuses is its problem, shown as a page.
        bad = await pager.get("/calls", params={"status": "exploded"})
        assert bad.status_code == 422 and "VALIDATION_FAILED" in bad.text
        forged = await pager.get("/calls", params={"cursor": "bm90LWEtY3Vyc29y"})
        assert forged.status_code == 400 and "INVALID_CURSOR" in forged.text


async def test_sign_in_with_a_jwt_and_refusals_at_sign_in(shared_gateway_stack: Stack) -> None:
    async with signed_in(shared_gateway_stack, user_jwt("carol", roles=["operator"])) as carol:
        overview = await carol.get("/calls")
        assert "carol" in overview.text and "operator" in overview.text

    async with httpx.AsyncClient(base_url=shared_gateway_stack.console) as client:
        token = await signin_form(client)
        wrong = await client.post("/signin", data={"csrf_token": token, "token": "nope"})
        assert wrong.status_code == 401 and "INVALID_TOKEN" in wrong.text
        assert COOKIE_NAME not in client.cookies
        expired = user_jwt("carol", lifetime=-60)
        token = await signin_form(client)
        late = await client.post("/signin", data={"csrf_token": token, "token": expired})
        assert late.status_code == 401 and COOKIE_NAME not in client.cookies
        # Auth is on: an empty credential is refused by the gateway, not let through.
        token = await signin_form(client)
        empty = await client.post("/signin", data={"csrf_token": token, "token": ""})
        assert empty.status_code == 401 and COOKIE_NAME not in client.cookies
        # A form posted without the sign-in cookie's token (another site's form): refused.
        forged = await client.post("/signin", data={"csrf_token": "x", "token": TOKENS["bob"]})
        assert forged.status_code == 403 and COOKIE_NAME not in client.cookies
        # A space, non-ASCII, too long, an encoded lone surrogate (not UTF-8), NUL.
        for unusable in ("a%20b", "tok%C3%A9n", "x" * 3000, "%ED%A0%80", "a%00b"):
            token = await signin_form(client)
            refused = await client.post(
                "/signin",
                content=f"csrf_token={token}&token={unusable}".encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert refused.status_code == 422, (unusable[:10], refused.text[:300])
            assert COOKIE_NAME not in client.cookies


async def test_without_a_session_pages_send_you_to_sign_in_and_back(
    shared_gateway_stack: Stack,
) -> None:
    async with httpx.AsyncClient(base_url=shared_gateway_stack.console) as client:
        page = await client.get("/calls", params={"tool": "echo"})
        assert page.status_code == 303
        assert page.headers["location"] == "/signin?next=/calls%3Ftool%3Decho"
        fragment = await client.get("/overview/services", headers={"HX-Request": "true"})
        assert fragment.status_code == 204 and fragment.headers["HX-Redirect"].startswith("/signin")
        # A sealed cookie from another console (another key), or altered: no session.
        client.cookies.set(COOKIE_NAME, "gAAAAABlZm9yZ2Vk")
        assert (await client.get("/calls")).status_code == 303

        token = await signin_form(client, "/calls?tool=echo")
        back = await client.post(
            "/signin",
            data={"csrf_token": token, "token": TOKENS["alice"], "next": "/calls?tool=echo"},
        )
        assert back.headers["location"] == "/calls?tool=echo"
    for elsewhere in ("//evil.example/", "https://evil.example/", "/\\evil.example", "javas:x"):
        async with httpx.AsyncClient(base_url=shared_gateway_stack.console) as client:
            token = await signin_form(client, elsewhere)
            answer = await client.post(
                "/signin", data={"csrf_token": token, "token": TOKENS["alice"], "next": elsewhere}
            )
            assert answer.headers["location"] == "/", elsewhere


async def test_sign_out_needs_the_sessions_csrf_token_and_ends_the_session(
    shared_gateway_stack: Stack,
) -> None:
    async with signed_in(shared_gateway_stack, TOKENS["alice"]) as alice:
        page = await alice.get("/calls")
        refused = await alice.post("/signout", data={"csrf_token": "not-it"})
        assert refused.status_code == 403 and "CSRF_FAILED" in refused.text
        assert (await alice.get("/calls")).status_code == 200
        done = await alice.post("/signout", data={"csrf_token": session_csrf(page.text)})
        assert done.status_code == 303 and done.headers["location"] == "/signin"
        assert (await alice.get("/calls")).status_code == 303


async def test_a_call_id_cannot_reach_another_gateway_route(shared_gateway_stack: Stack) -> None:
    call = await shared_gateway_stack.call_tool("alice", "echo", {"message": "x"})
    async with signed_in(shared_gateway_stack, TOKENS["alice"]) as alice:
        for sneaky in ("..%2Ftools", "%2E%2E", "x%2Fverify", f"{call['conclave_id']}%3Fa%3Db"):
            answer = await alice.get(f"/calls/{sneaky}")
            assert answer.status_code in (400, 404), (sneaky, answer.status_code)
            assert "evaluate_expression" not in answer.text  # the catalogue is not reached
        nul = await alice.get("/calls", params={"tool": "a\x00b"})
        assert nul.status_code == 422 and "UNSAFE_INPUT" in nul.text


async def test_pages_carry_the_browser_protections(shared_gateway_stack: Stack) -> None:
    async with signed_in(shared_gateway_stack, TOKENS["alice"]) as alice:
        page = await alice.get("/calls")
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["cache-control"] == "no-store"
        cookie = next(c for c in alice.cookies.jar if c.name == COOKIE_NAME)
        assert cookie.has_nonstandard_attr("HttpOnly")
        assert TOKENS["alice"] not in cookie.value  # sealed, not the token itself
        # A page of another site posting to the console is refused before any form is read.
        foreign = await alice.post(
            "/signout", data={"csrf_token": "x"}, headers={"Origin": "https://evil.example"}
        )
        assert foreign.status_code == 403 and "ORIGIN_NOT_ALLOWED" in foreign.text


async def test_a_revoked_credential_ends_the_session(shared_gateway_stack: Stack) -> None:
    async with signed_in(shared_gateway_stack, user_jwt("dora", lifetime=3)) as dora:
        assert (await dora.get("/calls")).status_code == 200
        await asyncio.sleep(3.5)
        expired = await dora.get("/calls")
        assert expired.status_code == 303 and expired.headers["location"].startswith("/signin")
        assert COOKIE_NAME not in dora.cookies


async def test_overview_shows_every_service_and_an_unreachable_one(shared_stack: Stack) -> None:
    async with signed_in(shared_stack, TOKENS["bob"]) as bob:
        page = await bob.get("/overview")
        assert page.status_code == 200
        for name in ("gateway", "collector", "graph", "edge"):
            assert f'data-service="{name}"' in page.text
        shown = re.findall(r'class="badge ([a-z]+)".*?(?:<small>([^<]*)</small>)?', page.text)
        assert page.text.count('class="badge healthy"') == 4, shown

    async with signed_in_gateway_only(shared_stack) as client:
        page = await client.get("/overview/services")
        assert page.text.count('class="badge healthy"') == 1
        assert page.text.count('class="badge unreachable"') == 3
        assert "The collector service cannot be reached." in page.text


@asynccontextmanager
async def signed_in_gateway_only(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    """A console that knows only the gateway (the other addresses closed)."""
    closed = "http://127.0.0.1:9"
    settings = ConsoleSettings(
        gateway_url=stack.urls["gateway"], collector_url=closed, graph_url=closed, edge_url=closed
    )
    async with (
        running_server(create_app(settings)) as url,
        signed_in(Stack(stack.urls, url, stack.backend), TOKENS["bob"]) as client,
    ):
        yield client


async def test_a_gateway_url_that_is_no_gateway_is_a_clear_problem_at_sign_in() -> None:
    async def anything(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})  # fmt: skip
        await send({"type": "http.response.body", "body": b'{"ok": true}'})

    async with running_server(anything) as elsewhere:
        settings = ConsoleSettings(gateway_url=elsewhere)
        async with (
            running_server(create_app(settings)) as console,
            httpx.AsyncClient(base_url=console) as client,
        ):
            token = await signin_form(client)
            answer = await client.post("/signin", data={"csrf_token": token, "token": "t"})
            assert answer.status_code == 502
            assert "UPSTREAM_ANSWER_INVALID" in answer.text and "CONSOLE_GATEWAY_URL" in answer.text
            assert COOKIE_NAME not in client.cookies


async def test_behind_a_tls_proxy_the_cookie_is_secure_and_https_is_kept(
    shared_gateway_stack: Stack,
) -> None:
    https = {"X-Forwarded-Proto": "https"}  # from loopback, a trusted proxy (uvicorn's default)
    async with httpx.AsyncClient(base_url=shared_gateway_stack.console, headers=https) as client:
        form = await client.get("/signin")
        assert form.headers["strict-transport-security"] == "max-age=31536000"
        token = CSRF.search(form.text)
        assert token is not None
        answer = await client.post(
            "/signin", data={"csrf_token": token.group(1), "token": TOKENS["alice"]}
        )
        cookie = next(c for c in answer.headers.get_list("set-cookie") if c.startswith(COOKIE_NAME))
        assert "secure" in cookie.lower()
    async with httpx.AsyncClient(base_url=shared_gateway_stack.console) as plain:
        assert "strict-transport-security" not in (await plain.get("/signin")).headers
