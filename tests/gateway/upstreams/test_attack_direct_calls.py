"""The outside attack on the gateway's direct ``tools/call`` to HTTP upstreams that answer JSON
(``gateway/upstreams/direct_calls.py``): each finding as a test that fails while the weakness is
there. The upstream is the MCP SDK's own server answering JSON (:mod:`.direct_hostile`), whose
``tools/call`` a test may answer itself, as a hostile or merely unusual server would."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
from mcp.server.streamable_http_manager import _error_response

from conclave.gateway.backends.breaker import CircuitBreaker
from tests.conftest import Backend, eventually
from tests.gateway.upstream_fixtures import gateway
from tests.gateway.upstreams.direct_hostile import (
    Send,
    answer,
    hostile_upstream,
    replayed,
    rpc,
    sdk_server,
)
from tests.gateway.upstreams.test_attack_upstreams import _status, loop_lag

PONG = {"content": [{"type": "text", "text": "pong"}]}
MCP_HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2025-06-18",
}


def entry(url: str, **extra: Any) -> dict[str, Any]:
    return {"name": "h", "transport": "http", "url": url, "timeout_seconds": 3, **extra}


async def ping(client: httpx.AsyncClient, user: str = "someone") -> httpx.Response:
    return await client.post(
        "/execute",
        json={"tool": "h__ping", "args": {}},
        headers={"X-Conclave-Acting-User": user},
    )


def event(message: bytes) -> bytes:
    return b"event: message\ndata: " + message + b"\n\n"


# -- Finding 1: every event-stream answer is a 502 TOOL_FAILED (and a breaker failure) -----------


async def test_an_event_stream_answer_is_read(backend: Backend, tmp_path: Path):
    """The module says "an event stream is still read if one comes" — a server answering
    ``initialize`` with JSON may answer a ``tools/call`` with a stream (the spec lets it choose
    per request; a proxy in front of a JSON server may). ``_from_event_stream`` builds an
    ``httpx2.Response`` without a request, and ``httpx2.EventSource`` reads
    ``response.request`` first: ``RuntimeError("The request instance has not been set on this
    response.")`` for every stream, whatever it holds. Nothing maps a ``RuntimeError``: the
    caller gets 502 ``TOOL_FAILED`` ("failed unexpectedly") instead of the result, and
    ``Upstream.call`` counts it as a transport failure — five such answers open the circuit
    and every tool of a healthy upstream answers 503 to everyone for 30 s."""

    async def on_call(message: dict[str, Any], _scope: Any, send: Send) -> bool:
        await answer(send, 200, event(rpc(message["id"], result=PONG)), "text/event-stream")
        return True

    async with hostile_upstream(on_call) as url, gateway(backend, tmp_path, entry(url)) as client:
        answers = [await ping(client) for _ in range(6)]
        status = await _status(client, "h")
    assert [a.status_code for a in answers] == [200] * 6, (answers[0].text, status["circuit"])
    assert answers[0].json()["result"] == "pong"


# -- Finding 2: an event stream is read to its end, not to the answer ---------------------------


async def test_an_event_stream_left_open_after_the_answer_is_answered_at_once(
    backend: Backend, tmp_path: Path
):
    """``_answer`` reads the whole body (``_read``) before looking for the answer in it, so a
    stream that stays open after the answer (the spec says a server SHOULD close it, not MUST;
    a server keeping it for later notifications, a proxy's keep-alive comments) holds the call
    until its time-out: 504 ``TOOL_TIMEOUT`` for a call the upstream answered at once, and a
    ``notifications/cancelled`` sent for a request that already finished. The SDK's client
    stops at the answer (``_handle_sse_response``: ``is_complete`` → ``aclose``)."""
    release = asyncio.Event()

    async def on_call(message: dict[str, Any], _scope: Any, send: Send) -> bool:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        body = event(rpc(message["id"], result=PONG))
        await send({"type": "http.response.body", "body": body, "more_body": True})
        while not release.is_set():  # keep-alive comments, as proxies send them
            await send(
                {"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True}
            )
            await asyncio.sleep(0.2)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return True

    # A call time-out far past the bound: a relay waiting for the stream's end would take it
    # (504), and an answer sent at once takes seconds at most on a loaded machine.
    async with (
        hostile_upstream(on_call) as url,
        gateway(backend, tmp_path, entry(url, timeout_seconds=30)) as client,
    ):
        started = time.monotonic()
        answered = await ping(client)
        took = time.monotonic() - started
        release.set()
    assert answered.status_code == 200, answered.text
    assert took < 10, f"an answer sent at once took {took:.1f} s"


# -- Finding 3: the cap applies to the whole stream, not to one message -------------------------


async def test_notifications_before_the_answer_do_not_count_towards_its_size(
    backend: Backend, tmp_path: Path
):
    """``GATEWAY_UPSTREAM_MAX_MESSAGE_BYTES`` bounds one message ("an event stream: per event,
    by the SDK", docs/gateway.md, Limits). The direct path caps the stream's whole body: a tool
    that logs while it works (``notifications/message``, each a few hundred bytes) and answers
    a small result fails with 422 ``RESULT_TOO_LARGE`` once its log lines add up to the cap,
    though no message came near it."""
    log_line = json.dumps(
        {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": "working " + "." * 200},
        }
    ).encode()

    async def on_call(message: dict[str, Any], _scope: Any, send: Send) -> bool:
        chunks = [event(log_line) * 50 for _ in range(20)]  # 1,000 lines, ~300 KB
        chunks.append(event(rpc(message["id"], result=PONG)))
        await answer(send, 200, chunks, "text/event-stream")
        return True

    async with (
        hostile_upstream(on_call) as url,
        gateway(backend, tmp_path, entry(url), upstream_max_message_bytes=65_536) as client,
    ):
        answered = await ping(client)
    assert answered.status_code == 200, answered.text
    assert answered.json()["result"] == "pong"


# -- Finding 4: parsing a stream holds the event loop for seconds -------------------------------


async def test_a_stream_of_tiny_events_does_not_stall_the_event_loop(
    backend: Backend, tmp_path: Path
):
    """``_from_event_stream`` parses the whole stream synchronously on the event loop, event by
    event in httpx2's pure-Python parser, ``json.loads`` on each. 2 MiB (under the default cap)
    of 8-byte events ``data:1`` — 270,000 of them — before the answer costs about 2 s of CPU
    here with nothing else running (measured once the ``RuntimeError`` of finding 1 is out of
    the way): every request of the gateway waits, per such answer (docs/gateway.md: parsing
    is "bounded by the message cap: about 10 ms for the largest"). The upstream controls it."""
    tiny = b"data:1\n\n" * 270_000

    async def on_call(message: dict[str, Any], _scope: Any, send: Send) -> bool:
        body = [tiny[i : i + 65_536] for i in range(0, len(tiny), 65_536)]
        await answer(
            send, 200, [*body, event(rpc(message["id"], result=PONG))], "text/event-stream"
        )
        return True

    async with hostile_upstream(on_call) as url, gateway(backend, tmp_path, entry(url)) as client:
        await ping(client, "warm-up")  # the gateway's start is not measured, only the call
        async with loop_lag() as worst:
            answered = await ping(client)
    assert answered.status_code in (200, 422), answered.text  # served, or refused as too large
    assert worst[0] < 1.0, f"the event loop stalled {worst[0]:.1f} s on one answer"


# -- Finding 5: a session the upstream forgot is never reopened ---------------------------------


async def test_a_session_the_upstream_forgot_is_reopened(backend: Backend, tmp_path: Path):
    """A 404 to a request carrying ``Mcp-Session-Id`` means the session is gone (the spec; the
    upstream restarted, or expired it idle). ``_answer`` looks at a 404's body first, and the
    MCP SDK's own server always puts a JSON-RPC error there (``StreamableHTTPSessionManager``:
    ``_error_response("Session not found", 404)``), so ``on_session_lost`` never runs for it:
    every call answers 502 ``UPSTREAM_FAILED`` "Session not found" and the supervisor keeps
    the dead session — for good with ``refresh_seconds: 0``, else until the next listing
    fails. (The per-user sessions replace such a session at once, docs/gateway.md.)"""
    forgotten: set[str] = set()
    restarted = False

    async def gate(_message: dict[str, Any], scope: dict[str, Any], send: Send) -> bool:
        session = dict(scope["headers"]).get(b"mcp-session-id", b"").decode()
        if not restarted:
            if session:
                forgotten.add(session)
            return False
        if session in forgotten:  # answered as the SDK's session manager answers it
            await _error_response("Session not found", 404)(scope, None, send)  # type: ignore[arg-type]
            return True
        return False

    async def on_call(_message: dict[str, Any], _scope: Any, _send: Send) -> bool:
        return False  # the SDK's server answers "pong"

    upstream = hostile_upstream(on_call, stateless=False, gate=gate)
    async with upstream as url, gateway(backend, tmp_path, entry(url, refresh_seconds=0)) as client:
        assert (await ping(client)).status_code == 200
        assert forgotten, "the session id was not seen"
        restarted = True  # the upstream restarts: it no longer knows the gateway's session
        first = await ping(client)

        async def served() -> bool:
            return (await ping(client)).status_code == 200

        try:
            await eventually(served, timeout=60)
        except AssertionError:
            status = await _status(client, "h")
            raise AssertionError(f"never reconnected: {first.text} {status}") from None


# -- Finding 6: an answer to another request is taken for this one ------------------------------


async def test_an_answer_to_another_request_is_not_taken(backend: Backend, tmp_path: Path):
    """The JSON answer's ``id`` is never compared with the request's (only a stream's events
    are): an answer for ``direct-99999`` — or for one of the SDK's integer ids on the session —
    is recorded ``succeeded`` and handed to the caller as this call's result. The SDK's session
    matches answers to requests by id and never resolves a request with another's answer."""

    async def on_call(_message: dict[str, Any], _scope: Any, send: Send) -> bool:
        result = {"content": [{"type": "text", "text": "someone else's"}]}
        await answer(send, 200, rpc("direct-99999", result=result))
        return True

    async with hostile_upstream(on_call) as url, gateway(backend, tmp_path, entry(url)) as client:
        answered = await ping(client)
    # Refused (502 UPSTREAM_FAILED), or left unanswered as the SDK's session leaves it (504).
    assert answered.json().get("code") in ("UPSTREAM_FAILED", "TOOL_TIMEOUT"), answered.text


# -- Finding 7: results nested past the SDK's parser are stored, then break /mcp and /calls ------


async def test_a_result_nested_too_deep_never_makes_a_500(backend: Backend, tmp_path: Path):
    """The SDK parses answers with pydantic's JSON parser, which refuses nesting beyond about
    200 levels (docs/gateway.md, Limits): such an answer was a 502. ``json.loads`` takes up
    to ~1,000: a ``structuredContent`` nested 600 deep is accepted, recorded ``succeeded``
    and answered on ``/execute``, but ``/mcp``'s ``tools/call`` answers 500 (serialising the
    result exceeds pydantic's depth) and ``GET /calls/{id}`` answers 500 for that call for
    good (the stored result cannot be served): an audit entry nobody can read."""
    deep = b"[" * 600 + b"]" * 600

    async def on_call(message: dict[str, Any], _scope: Any, send: Send) -> bool:
        body = b'{"jsonrpc":"2.0","id":%s,"result":{"content":[],"structuredContent":{"k":%s}}}'
        await answer(send, 200, body % (json.dumps(message["id"]).encode(), deep))
        return True

    async with hostile_upstream(on_call) as url, gateway(backend, tmp_path, entry(url)) as client:
        executed = await ping(client)
        record = await client.get(f"/calls/{executed.json()['conclave_id']}")
        init = {"protocolVersion": "2025-06-18", "capabilities": {}}
        init["clientInfo"] = {"name": "t", "version": "0"}
        opened = await client.post(
            "/mcp",
            headers=MCP_HEADERS,
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
        )
        headers = {
            **MCP_HEADERS,
            **{k: v for k, v in opened.headers.items() if k == "mcp-session-id"},
        }
        await client.post(
            "/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        called = await client.post(
            "/mcp",
            headers=headers,
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "h__ping", "arguments": {}},
            },
        )
    assert called.status_code != 500, called.text
    assert record.status_code != 500, record.text


# -- Finding 8: a result that is not an object counts as a transport failure --------------------


async def test_answers_that_are_not_results_do_not_open_the_circuit(
    backend: Backend, tmp_path: Path
):
    """``"result": "pong"`` (or an ``error`` of another shape) fails pydantic in
    ``DirectCalls.call``; the ``ValidationError`` reaches ``Upstream.call``'s ``except
    Exception`` and is counted as a transport failure. The SDK's client refuses the same
    message as PARSE_ERROR, an ``MCPError`` counted as "it answered". One tool (or one
    caller's arguments, when the upstream echoes them) answering five such results opens the
    circuit: every tool of the upstream answers 503 to everyone for 30 s."""

    async def on_call(message: dict[str, Any], _scope: Any, send: Send) -> bool:
        if message["params"]["name"] == "sleep":
            await answer(send, 200, rpc(message["id"], result="not an object"))
            return True
        return False

    async with hostile_upstream(on_call) as url, gateway(backend, tmp_path, entry(url)) as client:
        for _ in range(5):
            odd = await client.post("/execute", json={"tool": "h__sleep", "args": {}})
            assert odd.json()["code"] == "UPSTREAM_FAILED", odd.text
        other = await ping(client, "someone-else")
        status = await _status(client, "h")
    assert other.status_code == 200, (other.text, status["circuit"])


# -- Finding 9: a half-open circuit whose trial call times out stays shut for good ---------------


async def test_a_trial_call_that_times_out_does_not_pause_the_upstream_for_good(
    backend: Backend, tmp_path: Path
):
    """After five transport failures the breaker opens; 30 s later ``allow()`` lets one trial
    call through (``_trial_running = True``). ``Upstream.call`` records neither a success nor a
    failure for a ``REQUEST_TIMEOUT`` (nor for a caller who gives up), so when the trial is a
    slow call — any caller's ``sleep`` past the time-out — ``_trial_running`` is never cleared:
    the circuit says ``half-open`` and every call of every tool of the upstream answers 503
    ``UPSTREAM_UNAVAILABLE`` until the gateway restarts (a reconnection keeps the breaker)."""
    broken = True
    release = asyncio.Event()

    async def on_call(message: dict[str, Any], _scope: Any, send: Send) -> bool:
        if message["params"]["name"] == "sleep":
            await release.wait()
            return False
        if not broken:
            return False
        # A body shorter than its Content-Length: the connection breaks mid-answer.
        headers = [(b"content-type", b"application/json"), (b"content-length", b"1000")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"jsonrpc"', "more_body": False})
        return True

    async with hostile_upstream(on_call) as url, gateway(backend, tmp_path, entry(url)) as client:
        upstream = client.app.state.upstreams.upstreams["h"]  # type: ignore[attr-defined]
        upstream.breaker = CircuitBreaker(reset_seconds=0.5)  # 30 s in production
        failures = [(await ping(client)).json().get("code") for _ in range(5)]
        assert (await _status(client, "h"))["circuit"] == "open", failures
        broken = False  # the upstream is healthy again
        await asyncio.sleep(0.6)
        slow = await client.post("/execute", json={"tool": "h__sleep", "args": {"seconds": 9}})
        assert slow.json()["code"] == "TOOL_TIMEOUT", slow.text  # the trial call
        release.set()

        async def served() -> bool:
            return (await ping(client)).status_code == 200

        try:
            await eventually(served, timeout=60)
        except AssertionError:
            status = await _status(client, "h")
            raise AssertionError(f"still paused: {status['circuit']}, {failures}") from None


# -- Finding 10: after a lost session, an upstream now answering streams is reconnected forever --


async def test_a_lost_session_reopened_with_event_streams_stays_open(
    backend: Backend, tmp_path: Path
):
    """A 404 on the session sets ``Upstream._session_lost``; only ``_direct_calls`` clears it,
    and only when the new session's ``initialize`` is answered with JSON. When the upstream
    comes back answering event streams (redeployed with the SDK's default ``json_response=False``,
    or behind a load balancer over both kinds), the flag stays set: ``_watch`` ends every new,
    healthy connection half a second after it listed its tools. The supervisor reconnects about
    every 1.5 s for good (``restarts`` climbing, the upstream's tools re-listed each time, calls
    landing in the gaps answering 503 ``UPSTREAM_UNAVAILABLE``)."""
    forgotten: set[str] = set()
    restarted = False
    streams = sdk_server().streamable_http_app(json_response=False, stateless_http=True)

    async def gate(message: dict[str, Any], scope: dict[str, Any], send: Send) -> bool:
        session = dict(scope["headers"]).get(b"mcp-session-id", b"").decode()
        if not restarted:
            if session:
                forgotten.add(session)
            return False
        if session in forgotten:  # a plain 404, as a proxy answers for a backend that is gone
            await answer(send, 404, b"Not Found", "text/plain")
            return True
        await streams(scope, replayed(message), send)  # the new deployment: event streams
        return True

    async def on_call(_message: dict[str, Any], _scope: Any, _send: Send) -> bool:
        return False

    upstream = hostile_upstream(on_call, stateless=False, gate=gate)
    async with (
        streams.router.lifespan_context(streams),
        upstream as url,
        gateway(backend, tmp_path, entry(url, refresh_seconds=0)) as client,
    ):
        assert (await ping(client)).status_code == 200
        restarted = True
        lost = await ping(client)  # 404 on the session: reconnect

        async def reconnected() -> bool:
            status = await _status(client, "h")
            return status["restarts"] >= 1 and status["state"] == "ready"

        await eventually(reconnected, timeout=60)
        before = await _status(client, "h")
        await asyncio.sleep(3)
        after = await _status(client, "h")
        answered = await ping(client)
    assert after["restarts"] == before["restarts"], (lost.text, before, after)
    assert answered.status_code == 200, answered.text
