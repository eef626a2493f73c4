"""An outside attacker's findings on the operator console (issue 21): each test asserts what a
correct console does, and fails on the console as it stands.

Some tests put a hostile upstream in place of one service: a loopback server that answers garbage,
huge numbers or a trickle. It stands for a misconfigured URL, a proxy in the way, or a service that
is broken or compromised; the console must show that service as unusable, not fall over.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import hashlib
import hmac
import json
import resource
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from conclave.console.app import create_app
from conclave.console.session import COOKIE_NAME
from conclave.settings import ConsoleSettings
from tests.console.conftest import TOKENS, Stack
from tests.console.test_pages import session_csrf, signed_in, signin_form
from tests.hostile.conftest import JWT_SECRET
from tests.httpserver import running_server

CLOSED = "http://127.0.0.1:9"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
Body = bytes | Callable[[], AsyncIterator[bytes]]
Route = tuple[int, Body, str]

# One gateway and console for the module: each test signs in with its own session, and the
# hostile upstreams are its own.
pytestmark = pytest.mark.asyncio(loop_scope="module")

ANONYMOUS = (
    200,
    b'{"user_id":"anonymous","roles":["operator"],"method":"none"}',
    "application/json",
)
JSON = "application/json"
HEALTHY = (200, b'{"status":"healthy"}', JSON)
NO_METRICS = (200, b"", "text/plain")


def hostile_upstream(
    routes: Mapping[str, Route],
    seen: list[tuple[str, dict[str, str]]] | None = None,
    set_cookie: str | None = None,
) -> Callable[..., Awaitable[None]]:
    """A raw ASGI app answering each path with a fixed status, body (or async byte stream) and
    content type; 404 for any other path. Each request's path and headers go to ``seen``; every
    answer carries the ``Set-Cookie`` header ``set_cookie``, if given."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if seen is not None:
            headers_seen = {k.decode(): v.decode("latin-1") for k, v in scope["headers"]}
            seen.append((scope["path"], headers_seen))
        status, body, media_type = routes.get(scope["path"], (404, b"{}", "application/json"))
        headers = [(b"content-type", media_type.encode())]
        if isinstance(body, bytes) and body.startswith(ZSTD_MAGIC):
            headers.append((b"content-encoding", b"zstd"))
        if set_cookie is not None:
            headers.append((b"set-cookie", set_cookie.encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        if isinstance(body, bytes):
            await send({"type": "http.response.body", "body": body})
            return
        async for chunk in body():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


@asynccontextmanager
async def console_with(
    routes: Mapping[str, Route],
    gateway_url: str | None = None,
    seen: list[tuple[str, dict[str, str]]] | None = None,
    set_cookie: str | None = None,
    **settings: Any,
) -> AsyncIterator[str]:
    """A console whose edge service is a hostile upstream (and its gateway too, unless
    ``gateway_url`` names a real one); the collector and graph are unreachable."""
    async with running_server(hostile_upstream(routes, seen, set_cookie)) as upstream:
        console_settings = ConsoleSettings(
            gateway_url=gateway_url or upstream,
            collector_url=CLOSED,
            graph_url=CLOSED,
            edge_url=upstream,
            **settings,
        )
        async with running_server(create_app(console_settings)) as console:
            yield console


async def sign_in(client: httpx.AsyncClient, credential: str) -> httpx.Response:
    """Post the sign-in form with ``credential``; the console's answer."""
    token = await signin_form(client)
    return await client.post("/signin", data={"csrf_token": token, "token": credential})


def compact_jwt(user: str) -> str:
    """An HS256 JWT for ``user`` whose claims are UTF-8 JSON (PyJWT escapes non-ASCII as
    ``\\uXXXX``, which RFC 7519 does not ask for), as other issuers write them."""

    def part(document: dict[str, Any]) -> bytes:
        text = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
        return base64.urlsafe_b64encode(text).rstrip(b"=")

    now = int(time.time())
    signed = (
        part({"alg": "HS256", "typ": "JWT"})
        + b"."
        + part({"sub": user, "iat": now, "exp": now + 3600})
    )
    signature = hmac.new(JWT_SECRET.encode(), signed, hashlib.sha256).digest()
    return (signed + b"." + base64.urlsafe_b64encode(signature).rstrip(b"=")).decode()


def edge_row(html: str) -> str:
    """The edge service's row of the overview."""
    start = html.index('data-service="edge"')
    return html[start : html.index("</tr>", start)]


async def test_one_service_answering_non_finite_or_huge_numbers_leaves_the_overview_up(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: one service (or whatever its URL reaches) whose /health carries `1e400`, `NaN`, a
    # 400-digit integer or a non-list `warnings` makes every user's overview a 500: the operator
    # loses sight of all four services at the moment one of them misbehaves. Python's json reads
    # 1e400 as inf and NaN as nan; "%d" of them (and float() of a huge int) raises.
    bodies = [
        b'{"status":"healthy","checks":{"outbox":{"status":"ok","pending":1e400}}}',
        b'{"status":"healthy","checks":{"outbox":{"status":"ok","quarantined":NaN}}}',
        b'{"status":"healthy","checks":{"outbox":{"status":"ok","pending":' + b"9" * 400 + b"}}}",
        b'{"status":"healthy","warnings":5}',
        b"[" * 100_000 + b"]" * 100_000,  # json.loads raises RecursionError, not ValueError
    ]
    failures = []
    for body in bodies:
        routes = {"/health": (200, body, "application/json"), "/metrics": NO_METRICS}
        async with (
            console_with(routes, gateway_url=shared_gateway_stack.urls["gateway"]) as console,
            httpx.AsyncClient(base_url=console) as client,
        ):
            assert (await sign_in(client, TOKENS["bob"])).status_code == 303
            overview = await client.get("/overview")
            if overview.status_code != 200 or 'data-service="gateway"' not in overview.text:
                failures.append((body[:70], overview.status_code))
    assert failures == []


async def test_one_service_answering_a_malformed_metrics_exposition_leaves_the_overview_up(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: the Prometheus parser's ValueError (a bucket bound that is no number, a line that
    # is no sample) escapes figures_from_metrics and the whole overview is a 500, for everyone.
    expositions = [
        b'conclave_edge_http_request_duration_seconds_bucket{le="soon"} 1\n',
        b"this is not an exposition {{{\n",
    ]
    failures = []
    for text in expositions:
        routes = {"/health": HEALTHY, "/metrics": (200, text, "text/plain")}
        async with (
            console_with(routes, gateway_url=shared_gateway_stack.urls["gateway"]) as console,
            httpx.AsyncClient(base_url=console) as client,
        ):
            assert (await sign_in(client, TOKENS["bob"])).status_code == 303
            overview = await client.get("/overview")
            if overview.status_code != 200 or 'data-service="gateway"' not in overview.text:
                failures.append((text[:40], overview.status_code))
            else:
                assert "no metrics" in edge_row(overview.text)
    assert failures == []


async def test_a_gateway_whoami_answer_that_is_not_an_identity_is_a_problem_page() -> None:
    # Impact: sign-in reads `answer.json()["user_id"]` unchecked: a gateway URL that reaches
    # something else (a proxy's HTML page, a JSON list, an identity without user_id) makes the
    # sign-in a 500, and the 500 is raw problem+json in the browser, not a page (the app's
    # Exception handler is never reached: the platform's request middleware renders it first).
    answers: list[Route] = [
        (200, b"<html><body>proxy login</body></html>", "text/html"),
        (200, b"[]", "application/json"),
        (200, b'{"roles":["operator"]}', "application/json"),
        (200, b'{"user_id":"x","roles":5}', "application/json"),
    ]
    failures = []
    for whoami in answers:
        async with (
            console_with({"/whoami": whoami}) as console,
            httpx.AsyncClient(base_url=console) as client,
        ):
            answer = await sign_in(client, "some-token")
            shown = (
                answer.status_code == 502
                and answer.headers["content-type"].startswith("text/html")
                and "UPSTREAM_ANSWER_INVALID" in answer.text
                and COOKIE_NAME not in client.cookies
            )
            if not shown:
                failures.append((repr(whoami[1])[:40], answer.status_code))
    assert failures == []


async def test_a_gateway_answering_garbage_for_calls_is_a_problem_page() -> None:
    # Impact: /calls and /calls/{id} trust the shape of the gateway's JSON (`found.get`, every
    # call a dict, `duration_ms` a number) and catch only ValueError from json.loads (deep
    # nesting raises RecursionError): anything else is a 500 shown as raw JSON.
    routes: dict[str, Route] = {
        "/whoami": ANONYMOUS,
        "/calls": (200, b"[]", "application/json"),
        "/calls/a": (200, b'{"conclave_id":"a","duration_ms":"slow"}', "application/json"),
        "/calls/a/verify": (200, b'{"ok":false}', "application/json"),
        "/calls/b": (200, b"[1,2]", "application/json"),
        "/calls/c": (200, b"[" * 100_000 + b"]" * 100_000, "application/json"),
    }
    async with console_with(routes) as console, httpx.AsyncClient(base_url=console) as client:
        assert (await sign_in(client, "")).status_code == 303
        failures: list[tuple[str, object]] = []
        for path in ("/calls", "/calls/a", "/calls/b", "/calls/c"):
            answer = await client.get(path)
            if answer.status_code >= 500 and answer.status_code != 502:
                failures.append((path, answer.status_code))
            elif not answer.headers["content-type"].startswith("text/html"):
                failures.append((path, answer.headers["content-type"]))
    assert failures == []


async def test_a_service_trickling_its_answer_is_cut_at_the_upstream_time_budget(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: CONCLAVE_UPSTREAM_TIMEOUT_SECONDS is documented as "the time budget of one request
    # to a service", but httpx.Timeout(n) bounds each read, not the whole answer: a service (or
    # anything at its URL) sending a byte every 0.3 s holds every overview page and poll open as
    # long as it likes (here 7.2 s against a 1 s budget; it could be hours), each holding a
    # connection of the console's pool of 100. 7.2 s is past the 5 s the test allows whatever
    # the machine's speed (the 1 s budget leaves 4 s for a loaded machine's page), and the test
    # waits for the whole trickle as it stops the upstream.
    async def trickle() -> AsyncIterator[bytes]:
        for _ in range(24):
            yield b" "
            await asyncio.sleep(0.3)
        yield b'{"status":"healthy"}'

    routes: dict[str, Route] = {
        "/health": (200, trickle, "application/json"),
        "/metrics": NO_METRICS,
    }
    async with (
        console_with(
            routes, gateway_url=shared_gateway_stack.urls["gateway"], upstream_timeout_seconds=1.0
        ) as console,
        httpx.AsyncClient(base_url=console, timeout=30) as client,
    ):
        assert (await sign_in(client, TOKENS["bob"])).status_code == 303
        started = time.monotonic()
        overview = await client.get("/overview")
        took = time.monotonic() - started
        assert overview.status_code == 200
        assert took < 5.0, f"the overview took {took:.1f} s with a 1 s upstream budget"
        assert "did not answer in time" in edge_row(overview.text)


async def test_a_missing_static_file_is_not_a_cacheable_page_carrying_the_session(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: the session cookie's path is "/", so it is sent to /static/ too; a 404 there is
    # the problem page with the signed-in user's id and session CSRF token in its sign-out form,
    # but SecurityHeadersMiddleware skips `Cache-Control: no-store` for every /static/ path. A
    # shared cache that keeps 404s (they are heuristically cacheable) hands one user's CSRF token
    # and identity to the next visitor of that URL.
    async with signed_in(shared_gateway_stack, TOKENS["alice"]) as alice:
        csrf = session_csrf((await alice.get("/calls")).text)
        missing = await alice.get("/static/no-such-file.js")
        assert missing.status_code == 404
        carries_session = csrf in missing.text or "alice" in missing.text
        assert not carries_session or "no-store" in missing.headers.get("cache-control", "")


async def test_a_session_cookie_copied_before_sign_out_no_longer_works(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: sign-out only asks the browser to drop the cookie; the sealed cookie itself stays
    # valid for CONCLAVE_SESSION_HOURS (8 h by default). A copy taken before sign-out (shared
    # computer, a backup of the profile, malware, a proxy log) keeps acting as the user with
    # their bearer token inside, and "Sign out" gives the user no way to end it.
    async with signed_in(shared_gateway_stack, TOKENS["alice"]) as alice:
        page = await alice.get("/calls")
        copied = alice.cookies[COOKIE_NAME]
        done = await alice.post("/signout", data={"csrf_token": session_csrf(page.text)})
        assert done.status_code == 303
    async with httpx.AsyncClient(base_url=shared_gateway_stack.console) as thief:
        thief.cookies.set(COOKIE_NAME, copied)
        replayed = await thief.get("/calls")
        assert replayed.status_code == 303, "the signed-out session still shows alice's calls"


async def test_a_poll_that_finds_the_session_gone_signs_in_back_to_the_overview(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: when the session ends while the overview is open, the next htmx poll of
    # /overview/services answers HX-Redirect to /signin?next=/overview/services: after signing
    # in, the browser lands on the bare fragment (a table with no page, no styles, no
    # navigation), not on the overview the user was watching.
    async with httpx.AsyncClient(base_url=shared_gateway_stack.console) as client:
        poll = await client.get(
            "/overview/services",
            headers={
                "HX-Request": "true",
                "HX-Current-URL": f"{shared_gateway_stack.console}/overview",
            },
        )
        assert poll.status_code == 204
        target = httpx.URL(poll.headers["HX-Redirect"])
        assert target.path == "/signin" and target.params.get("next") == "/overview"


async def test_the_consoles_own_whoami_does_not_call_a_stranger_an_operator(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: create_service_app gives the console the services' GET /whoami, but the console
    # has no authentication of its own (no token table): it answers every caller, signed in or
    # not, with any bearer token or none, "anonymous" with the role operator. A tool or script
    # that asks the console who it is gets a false identity; the services behind it have auth on.
    async with httpx.AsyncClient(base_url=shared_gateway_stack.console) as stranger:
        answer = await stranger.get("/whoami", headers={"Authorization": "Bearer made-up"})
    claims_operator = answer.status_code == 200 and "operator" in answer.json().get("roles", [])
    assert not claims_operator, answer.text


async def test_a_long_user_id_does_not_make_a_session_cookie_browsers_drop(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: the sealed cookie holds the credential (up to 2048 characters) and the user id
    # (up to 256 characters, JSON-escaped: 12 bytes for a character outside the BMP), so a valid
    # sign-in can answer a Set-Cookie over the 4096 bytes browsers keep. The browser drops it
    # silently and the user is sent back to the sign-in form with no reason given, every time.
    credential = compact_jwt("\N{GRINNING FACE}" * 256)
    assert len(credential) <= 2048
    async with httpx.AsyncClient(base_url=shared_gateway_stack.console) as client:
        answer = await sign_in(client, credential)
        cookies = answer.headers.get_list("set-cookie")
        session_cookie = next((c for c in cookies if c.startswith(f"{COOKIE_NAME}=")), None)
        if answer.status_code == 303:
            assert session_cookie is not None
            name_and_value = session_cookie.split(";", 1)[0]
            assert len(name_and_value) <= 4096, f"a {len(name_and_value)}-byte cookie"
        else:  # refused: a problem page saying why, and no cookie
            assert session_cookie is None and "problem" in answer.text


async def test_one_service_refusing_the_token_does_not_sign_the_user_out_of_the_console(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: any 401 from any service raises SignInExpired, which deletes the session cookie.
    # /health and /metrics take no credential, so a 401 there only comes from something else at
    # that URL (an authenticating proxy in front of the edge intake, a service with another token
    # table); yet it signs the user out of the whole console on every visit of the overview: they
    # sign in, see the overview fail, and are back at the sign-in form, for good.
    refused = (401, b'{"title":"Unauthorized","code":"INVALID_TOKEN"}', "application/problem+json")
    routes: dict[str, Route] = {"/health": refused, "/metrics": refused}
    async with (
        console_with(routes, gateway_url=shared_gateway_stack.urls["gateway"]) as console,
        httpx.AsyncClient(base_url=console) as client,
    ):
        assert (await sign_in(client, TOKENS["bob"])).status_code == 303
        overview = await client.get("/overview")
        assert overview.status_code == 200, overview.headers.get("location")
        assert 'data-service="gateway"' in overview.text
        assert COOKIE_NAME in client.cookies
        assert (await client.get("/calls")).status_code == 200  # still signed in


async def test_the_users_token_goes_only_to_routes_that_need_it(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: every overview page and every 5 s poll sends the signed-in user's bearer token to
    # /health and /metrics of all four services, which authenticate nobody there. Whatever
    # answers at a service URL that is wrong (a typo, a decommissioned host, a plain-http address
    # on another machine) collects every operator's token, eight times per poll per open tab.
    seen: list[tuple[str, dict[str, str]]] = []
    routes: dict[str, Route] = {"/health": HEALTHY, "/metrics": NO_METRICS}
    async with (
        console_with(
            routes, gateway_url=shared_gateway_stack.urls["gateway"], seen=seen
        ) as console,
        httpx.AsyncClient(base_url=console) as client,
    ):
        assert (await sign_in(client, TOKENS["olga"])).status_code == 303
        assert (await client.get("/overview")).status_code == 200
    probes = [(path, headers) for path, headers in seen if path in ("/health", "/metrics")]
    assert probes, "the overview asked the edge nothing"
    leaked = [
        path for path, headers in probes if TOKENS["olga"] in headers.get("authorization", "")
    ]
    assert leaked == [], f"olga's token was sent to the edge's {leaked}"


async def test_a_huge_health_answer_does_not_make_a_huge_overview(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: the overview renders every warning and check a /health answer lists, up to the
    # 16 MB MAX_ANSWER_BYTES, synchronously on the event loop. Measured: a 15.6 MB answer of
    # 3.9 M one-letter warnings made a 140 MB fragment in 23 s of rendering, during which the
    # console answered no one, and again at every 5 s poll of every open overview. Here 300,000
    # warnings (1.2 MB) make a fragment near 10 MB; a correct console shows a bounded number.
    warnings = b",".join([b'"w"'] * 300_000)
    body = b'{"status":"degraded","warnings":[' + warnings + b"]}"
    routes: dict[str, Route] = {"/health": (200, body, "application/json"), "/metrics": NO_METRICS}
    async with (
        console_with(routes, gateway_url=shared_gateway_stack.urls["gateway"]) as console,
        httpx.AsyncClient(base_url=console, timeout=60) as client,
    ):
        assert (await sign_in(client, TOKENS["olga"])).status_code == 303
        fragment = await client.get("/overview/services")
        assert fragment.status_code == 200
        assert len(fragment.content) < 1_000_000, f"a {len(fragment.content):,}-byte fragment"


async def test_a_file_posted_to_the_sign_in_form_is_closed(shared_gateway_stack: Stack) -> None:
    # Impact: sign-in (and checked_form) read `await request.form()` and never close it, so a
    # multipart body with a file part leaves a SpooledTemporaryFile open until the garbage
    # collector finds it (the suite's warning filter turns that ResourceWarning into a failure).
    # Anyone, signed in or not, can post such bodies to /signin as fast as they like.
    async with httpx.AsyncClient(base_url=shared_gateway_stack.console) as client:
        token = await signin_form(client)
        answer = await client.post(
            "/signin", data={"csrf_token": token}, files={"token": ("t.txt", b"x" * 1000)}
        )
        # Refused before the body is read: the console's forms are URL-encoded only.
        assert answer.status_code == 415
        gc.collect()


async def test_a_non_ascii_sign_in_form_token_is_a_stale_form_not_a_500(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: sign-in compares the form's token with the cookie's by secrets.compare_digest,
    # which raises TypeError on a str that is not ASCII: anyone, signed in or not, gets a 500
    # (raw problem+json) from POST /signin with `csrf_token=%C3%A9`, or with a sign-in cookie
    # holding a non-ASCII byte, and every such request is logged as an internal error.
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    async with httpx.AsyncClient(base_url=shared_gateway_stack.console) as client:
        await signin_form(client)
        typed = await client.post("/signin", content=b"csrf_token=%C3%A9&token=x", headers=form)
        assert typed.status_code == 403 and "CSRF_FAILED" in typed.text
    async with httpx.AsyncClient(base_url=shared_gateway_stack.console) as client:
        raw_headers = [
            (b"content-type", b"application/x-www-form-urlencoded"),
            (b"cookie", b"conclave_console_signin=\xc3\xa9"),
        ]
        tossed = await client.post("/signin", content=b"csrf_token=x&token=x", headers=raw_headers)
        assert tossed.status_code == 403 and "CSRF_FAILED" in tossed.text


async def test_one_user_polling_a_slow_service_does_not_starve_everyone_elses_pages(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: all users share one HTTP client of 100 connections, and each overview holds two
    # of them on every service until it answers or the time budget ends. While one service is
    # slow (here 8 s, under the 10 s budget), one signed-in user (any user, not only an operator)
    # opening 60 overviews at once holds all 100 connections; everyone else's sign-in and audit
    # pages then wait for a free connection, up to the budget, and fail as "did not answer in
    # time" although the gateway itself is idle and fast.
    async def slow() -> AsyncIterator[bytes]:
        await asyncio.sleep(8)  # what a starved page waits: twice the bound below
        yield b'{"status":"healthy"}'

    routes: dict[str, Route] = {"/health": (200, slow, JSON), "/metrics": (200, slow, JSON)}
    async with (
        console_with(routes, gateway_url=shared_gateway_stack.urls["gateway"]) as console,
        httpx.AsyncClient(base_url=console, timeout=30) as bob,
        httpx.AsyncClient(base_url=console, timeout=30) as alice,
    ):
        assert (await sign_in(bob, TOKENS["bob"])).status_code == 303
        assert (await sign_in(alice, TOKENS["alice"])).status_code == 303
        polls = [asyncio.create_task(bob.get("/overview/services")) for _ in range(60)]
        await asyncio.sleep(0.5)
        started = time.monotonic()
        calls = await alice.get("/calls")
        took = time.monotonic() - started
        await asyncio.gather(*polls)
        assert calls.status_code == 200
        assert took < 4.0, f"alice's audit page waited {took:.1f} s for bob's overviews"


async def test_a_cookie_a_service_sets_for_one_user_is_not_sent_with_anothers_requests(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: every user's requests go through one httpx.AsyncClient, whose cookie jar keeps any
    # Set-Cookie a service URL answers and sends it with every later request, whoever makes it.
    # An authenticating proxy or load balancer in front of a service (its session or sticky
    # cookie set while olga, an operator, looked) then carries olga's proxy session on bob's
    # requests: one user acts with another's ambient credential.
    seen: list[tuple[str, dict[str, str]]] = []
    routes: dict[str, Route] = {"/health": HEALTHY, "/metrics": NO_METRICS}
    proxy_cookie = "proxy_session=olga-at-the-proxy; Path=/"
    async with (
        console_with(
            routes,
            gateway_url=shared_gateway_stack.urls["gateway"],
            seen=seen,
            set_cookie=proxy_cookie,
        ) as console,
        httpx.AsyncClient(base_url=console) as olga,
        httpx.AsyncClient(base_url=console) as bob,
    ):
        assert (await sign_in(olga, TOKENS["olga"])).status_code == 303
        assert (await olga.get("/overview")).status_code == 200
        seen.clear()
        assert (await sign_in(bob, TOKENS["bob"])).status_code == 303
        assert (await bob.get("/overview")).status_code == 200
    bobs = [headers for _path, headers in seen if TOKENS["bob"] in headers.get("authorization", "")]
    carried = [
        headers for _path, headers in seen if "olga-at-the-proxy" in headers.get("cookie", "")
    ]
    assert carried == [], (
        f"{len(carried)} of bob's edge requests ({len(bobs)} with his token) carried olga's cookie"
    )


async def test_a_compressed_answer_is_not_inflated_past_the_answer_limit(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: the console's client asks for gzip, deflate and zstd, and httpx inflates each
    # network chunk whole before Services.request compares the body with MAX_ANSWER_BYTES
    # (16 MB). 8 KB of zstd from whatever answers at a service URL inflate to 256 MB in one
    # chunk (held twice while it is appended); 32 KB would be 1 GB, at every overview poll of
    # every open tab: the console is killed for memory long before the limit is checked.
    # httpx speaks zstd whenever `zstandard` is importable (here it comes with langsmith); gzip
    # alone inflates about 1000:1 per chunk, 64 MB for a 64 KB read.
    zstandard = pytest.importorskip("zstandard")
    compressing = zstandard.ZstdCompressor().compressobj()
    zeros = bytes(1024 * 1024)
    bomb = b"".join(compressing.compress(zeros) for _ in range(256)) + compressing.flush()
    assert len(bomb) < 16 * 1024 and bomb.startswith(ZSTD_MAGIC)
    routes: dict[str, Route] = {"/health": (200, bomb, JSON), "/metrics": NO_METRICS}
    async with (
        console_with(routes, gateway_url=shared_gateway_stack.urls["gateway"]) as console,
        httpx.AsyncClient(base_url=console, timeout=60) as client,
    ):
        assert (await sign_in(client, TOKENS["olga"])).status_code == 303
        peak_before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        overview = await client.get("/overview")
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before_kb) / 1024
        assert overview.status_code == 200
        assert grown_mb < 64, f"the console's peak memory grew by {grown_mb:.0f} MB"


async def test_a_large_metrics_exposition_costs_the_overview_little(
    shared_gateway_stack: Stack,
) -> None:
    # Impact: figures_from_metrics parses up to MAX_METRICS_CHARS (4 M characters) with the pure
    # Python Prometheus parser: 2.2 s of CPU for one 4 MB exposition (measured), per service, per
    # overview page and per 5 s poll of every open tab. Off the event loop, but holding the GIL
    # and the default thread pool: a handful of tabs keep a core busy and every page slow. A
    # service's own exposition is tens of kilobytes; a correct console gives up far sooner.
    line = b'conclave_edge_http_requests_total{method="GET",route="/x",status="200"} 1\n'
    text = line * (4_000_000 // len(line))
    routes: dict[str, Route] = {"/health": HEALTHY, "/metrics": (200, text, "text/plain")}
    async with (
        console_with(routes, gateway_url=shared_gateway_stack.urls["gateway"]) as console,
        httpx.AsyncClient(base_url=console, timeout=60) as client,
    ):
        assert (await sign_in(client, TOKENS["olga"])).status_code == 303
        # The process's CPU time (the console's threads and loop, and the upstream's sending):
        # the parsing this is about, not the waits for a core of a loaded machine.
        started = time.process_time()
        overview = await client.get("/overview/services")
        took = time.process_time() - started
        assert overview.status_code == 200
        assert took < 1.0, f"one 4 MB exposition cost the overview {took:.1f} s of CPU"
