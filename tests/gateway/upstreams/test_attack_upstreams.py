"""The outside attack on upstream MCP servers (gateway federation): each finding as a test that
fails while the weakness is there. The hostile servers: :mod:`.attack_mcp_server` (stdio) and a
streamable-HTTP server built here with the SDK's low-level server API."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.server.lowlevel import Server

from conclave.gateway.upstreams.upstream_errors import describe
from tests.conftest import Backend, eventually
from tests.gateway.upstream_fixtures import ROOT, gateway
from tests.httpserver import running_server


def attack_entry(*args: str, name: str = "attack", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "transport": "stdio",
        "command": sys.executable,
        "args": ["-m", "tests.gateway.upstreams.attack_mcp_server", *args],
        "cwd": str(ROOT),
        "env": {"PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"},
        "timeout_seconds": 10,
        **extra,
    }


async def _status(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    listing = (await client.get("/upstreams")).json()
    [entry] = [item for item in listing["upstreams"] if item["name"] == name]
    return dict(entry)


@asynccontextmanager
async def loop_lag(clock: Callable[[], float] = time.thread_time) -> AsyncIterator[list[float]]:
    """The longest the event loop went without running a 50 ms ticker, in seconds ([0]), on
    ``clock``: by default the loop thread's CPU time, the work that held the loop (the wall
    clock also counts waits for a core, long on a loaded machine); ``time.monotonic`` where the
    loop could be held waiting (blocking I/O)."""
    worst = [0.0]
    stop = asyncio.Event()

    async def tick() -> None:
        last = clock()
        while not stop.is_set():
            await asyncio.sleep(0.05)
            now = clock()
            worst[0] = max(worst[0], now - last)
            last = now

    task = asyncio.create_task(tick())
    await asyncio.sleep(0.1)  # the ticker has started before the block runs
    try:
        yield worst
    finally:
        stop.set()
        await task


# -- Finding 1: an upstream's output `pattern` backtracks on the event loop ---------------------


async def test_upstream_output_pattern_cannot_block_the_event_loop(
    backend: Backend, tmp_path: Path
):
    """A hostile upstream lists a tool whose outputSchema holds ``^(a+)+$`` and answers
    ``"aaaa…a!"``. jsonschema_rs rejects it at once (linear regex), so the chain asks the
    reference validator (``jsonschema``, Python's backtracking ``re``) for the errors — on the
    event loop, in ``ServiceCore._judge``: every request of the gateway waits, and the tool's
    time-out cannot fire (nothing awaits). Each extra ``a`` doubles the stall; 27 is several
    seconds here, 40 would be days."""
    async with gateway(backend, tmp_path, attack_entry("--redos", "27")) as client:
        assert (await _status(client, "attack"))["state"] == "ready"
        async with loop_lag() as worst:
            answer = await client.post("/execute", json={"tool": "attack__redos", "args": {}})
        assert answer.json().get("code") == "OUTPUT_INVALID", answer.text
        assert worst[0] < 1.0, f"the event loop stalled {worst[0]:.1f} s on one answer"


async def test_user_argument_against_upstream_input_pattern_cannot_block_the_event_loop(
    backend: Backend, tmp_path: Path
):
    """The same through a caller's arguments: the upstream's inputSchema is what the chain
    validates arguments against (``_reject`` → ``schema_errors``, on the event loop, before
    anything is recorded), so any user may send the string that backtracks and stall every
    other user's requests; with no call made, no audit row says who did."""
    async with gateway(backend, tmp_path, attack_entry()) as client:
        assert (await _status(client, "attack"))["state"] == "ready"
        # A first refusal outside the measure: what the first call of a process pays once
        # (imports, caches) is not what the argument costs (CI once measured 2 s of it).
        await client.post("/execute", json={"tool": "attack__redos_input", "args": {"s": "!"}})
        async with loop_lag() as worst:
            answer = await client.post(
                "/execute", json={"tool": "attack__redos_input", "args": {"s": "a" * 27 + "!"}}
            )
        assert answer.json().get("code") == "VALIDATION_FAILED", answer.text
        assert worst[0] < 1.0, f"the event loop stalled {worst[0]:.1f} s on one argument"


async def test_unique_items_of_distinct_objects_cannot_block_the_event_loop(
    backend: Backend, tmp_path: Path
):
    """No hostile pattern needed: an ordinary ``{"type": "array", "uniqueItems": true}`` in a
    tool's input schema, and a caller who sends 1,500 distinct small objects (18 KB, far under
    GATEWAY_MAX_ARGS_BYTES) and leaves out a required field. jsonschema_rs says "invalid", the
    reference validator then words the errors and checks ``uniqueItems`` of unhashable items
    pairwise (O(n²) ``equal`` calls in Python), on the event loop: about 5 s here for 1,500,
    100 s for 8,000 (90 KB). The same holds for an upstream's output schema and answer, and for
    any built-in tool with such a schema."""
    async with gateway(backend, tmp_path, attack_entry()) as client:
        assert (await _status(client, "attack"))["state"] == "ready"
        items = [{"a": i} for i in range(1500)]
        await client.post("/execute", json={"tool": "attack__unique", "args": {"items": []}})
        async with loop_lag() as worst:
            answer = await client.post(
                "/execute", json={"tool": "attack__unique", "args": {"items": items}}
            )
        assert answer.json().get("code") == "VALIDATION_FAILED", answer.text
        assert worst[0] < 1.0, f"the event loop stalled {worst[0]:.1f} s on one argument"


async def test_a_listing_within_the_bounds_is_served_in_seconds(backend: Backend, tmp_path: Path):
    """Every bound holds (schemas under MAX_SCHEMA_BYTES, one message under the cap), yet 8
    tools of ~200 KB input schemas (7,000 plain properties each) take minutes to list: each
    schema goes through ``Draft202012Validator.check_schema`` (the metaschema in pure Python,
    ~5 s a schema here) in ``build_entries``. At the default bounds (1,000 tools, 20 pages) one
    upstream's listing is hours of CPU per refresh, repeated at every ``list_changed`` (one per
    debounce interval), holding ``Upstreams._applying`` (no other upstream's listing is applied
    meanwhile), contending for the GIL with the event loop, and — a thread cannot be cancelled
    — holding the process's exit until it is done. (Seen here: 152 such tools kept a test's
    gateway busy for 9 minutes.)"""
    entry = attack_entry("--fat", "1", timeout_seconds=60)
    async with gateway(backend, tmp_path, entry, upstream_start_wait_seconds=1) as client:
        started = time.monotonic()

        async def listed() -> bool:
            return (await _status(client, "attack"))["refreshes"] >= 1

        with contextlib.suppress(AssertionError, TimeoutError):
            await eventually(listed, timeout=60)
        status = await _status(client, "attack")
        took = time.monotonic() - started
    assert status["refreshes"] >= 1 and status["tools"] == 13, (status, f"{took:.0f} s")
    # The 14th, whose schema's $ref leaves it, is refused (nothing fetched) and noted.
    assert any("$ref" in note for note in status["notes"]), status["notes"]


# -- Finding 2: a remote $ref of an upstream's schema is fetched by urllib ----------------------


@pytest.fixture
def refused_host() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.2 (not allowed by the egress policy: only 127.0.0.1 is) that
    records the paths asked and answers after 2 s; its base URL and the paths."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            time.sleep(2)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"type": "string"}')

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.2:{server.server_port}", hits
    finally:
        server.shutdown()
        server.server_close()


async def test_upstream_schema_remote_ref_is_not_fetched(
    backend: Backend, tmp_path: Path, refused_host: tuple[str, list[str]]
):
    """A hostile upstream lists a tool whose inputSchema is ``{"$ref": "http://<internal>/…"}``.
    jsonschema_rs is built ``offline`` and refuses it, so every call's arguments go to the
    reference validator, whose default retrieval (deprecated, still on in jsonschema 4.26) opens
    the URL with ``urllib.request.urlopen``: an SSRF from the gateway's network position to any
    address the upstream names, outside the egress policy (127.0.0.2 is not allowed here), with
    no time-out, synchronously on the event loop (an address that accepts and never answers
    hangs the whole gateway). Any user's call of the tool triggers it."""
    base, hits = refused_host
    entry = attack_entry("--ref", f"{base}/metadata/secret.json")
    async with gateway(backend, tmp_path, entry) as client:
        assert (await _status(client, "attack"))["state"] == "ready"
        async with loop_lag(time.monotonic) as worst:  # a fetch waits: the wall clock
            answer = await client.post(
                "/execute", json={"tool": "attack__remote_ref", "args": {"x": 1}}
            )
        assert hits == [], f"the gateway fetched {hits} for an upstream's schema ({answer.text})"
        assert worst[0] < 1.0, f"the event loop stalled {worst[0]:.1f} s on a schema fetch"
        assert answer.status_code != 500, answer.text  # the document it got is Unresolvable


# -- Finding 3: one caller's slow arguments open the circuit for every caller -------------------


async def test_one_callers_timeouts_do_not_pause_the_upstream_for_everyone(
    backend: Backend, tmp_path: Path
):
    """``Upstream.call`` counts a ``REQUEST_TIMEOUT`` (and a cancellation) as a failure of the
    upstream. A time-out is what the caller's own arguments asked for (``sleep 5`` against a
    1 s time-out; server-everything's ``trigger-long-running-operation`` ``duration`` alike),
    so five such calls by one caller open the breaker and every other caller's calls of every
    tool of that upstream answer 503 UPSTREAM_UNAVAILABLE for 30 s, though the upstream is
    healthy and answers ``pid`` at once."""
    async with gateway(backend, tmp_path, attack_entry(timeout_seconds=1)) as client:
        assert (await _status(client, "attack"))["state"] == "ready"
        for _ in range(5):
            slow = await client.post(
                "/execute", json={"tool": "attack__sleep", "args": {"seconds": 5}}
            )
            assert slow.json()["code"] == "TOOL_TIMEOUT", slow.text
        other = await client.post(
            "/execute",
            json={"tool": "attack__pid", "args": {}},
            headers={"X-Conclave-Acting-User": "someone-else"},
        )
        status = await _status(client, "attack")
    assert other.status_code == 200, (other.text, status["circuit"])


# -- Finding 4: shutdown waits on an HTTP upstream that never answers its DELETE ----------------


def _http_server(release: asyncio.Event) -> Any:
    tools = [types.Tool(name="ping", description="Answers pong.", input_schema={"type": "object"})]

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(_ctx: Any, _params: Any) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text="pong")])

    server = Server("stuck", version="0", on_list_tools=list_tools, on_call_tool=call_tool)
    inner = server.streamable_http_app()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "DELETE":
            await release.wait()  # session termination not answered until the test is done
        await inner(scope, receive, send)

    return app


async def test_shutdown_does_not_wait_for_a_stuck_http_upstream(backend: Backend, tmp_path: Path):
    """On shutdown the SDK's streamable HTTP client sends DELETE to end the session, in a
    ``finally`` the supervisor's cancellation does not reach (asyncio delivers it once), bounded
    only by the entry's read time-out (up to 600 s). An upstream that accepts the DELETE and never
    answers holds the gateway's shutdown that long."""
    release = asyncio.Event()
    async with running_server(_http_server(release), timeout_graceful_shutdown=1) as base:
        # The read time-out the DELETE would wait out: far past the bound, which allows a
        # loaded machine's slow shutdown.
        entry = {"name": "stuck", "transport": "http", "url": f"{base}/mcp", "timeout_seconds": 60}
        started = None
        async with gateway(backend, tmp_path, entry) as client:
            assert (await _status(client, "stuck"))["state"] == "ready"
            ping = await client.post("/execute", json={"tool": "stuck__ping", "args": {}})
            assert ping.status_code == 200, ping.text
            started = time.monotonic()
        took = time.monotonic() - started
        release.set()
    assert took < 20, f"shutdown took {took:.1f} s"


def test_last_error_never_shows_an_upstream_url() -> None:
    # /upstreams is for any signed-in user; httpx words an HTTP error with the whole URL, and an
    # operator may have put a credential in an upstream URL's query.
    request = httpx.Request("GET", "https://up.example/mcp?api_key=SECRET")
    error = httpx.HTTPStatusError(
        "Client error '401 Unauthorized' for url 'https://up.example/mcp?api_key=SECRET'",
        request=request,
        response=httpx.Response(401, request=request),
    )
    assert describe(error) == "HTTPStatusError: Client error '401 Unauthorized' for url '<url>'"
