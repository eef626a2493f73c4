"""Attacks on users' own upstream credentials, kept as regression tests.

Each test states what the product promises (docs/security.md, "Upstream credentials at rest";
docs/gateway.md, "Credentials": the plaintext is never answered, logged, audited or published)
and the attack an outside review found against it. Docstrings describe the attack; the
assertions, the guarded behaviour.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import mcp_types as types
import pytest
from starlette.types import Receive, Scope, Send

from conclave.gateway.app import create_app
from conclave.gateway.upstreams.credentials import new_key_text
from tests.conftest import Backend, eventually, open_platform, serve_app, test_settings  # noqa: F401
from tests.gateway.conftest import audit_rows
from tests.gateway.upstream_fixtures import ALLOW_LOOPBACK, catalogue
from tests.gateway.upstreams.credential_mcp_server import CredentialServer
from tests.gateway.upstreams.test_upstream_credentials import TOKENS, bearer, execute, register
from tests.httpserver import running_server

KEY = new_key_text()
ECHO_INIT = "Bearer echo-init-"


class EchoServer(CredentialServer):
    """The credential server, plus what real upstreams do with a token they dislike: answer
    the ``initialize`` with a JSON-RPC error quoting the Authorization header it got
    ("invalid token: Bearer ..."), and tools that echo the header JSON-encoded."""

    seen_ids: set[bytes]
    dead: set[bytes]

    def restart(self) -> None:
        """Forget every session (the upstream was redeployed): their ids now answer 404."""
        self.dead = set(self.seen_ids)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not hasattr(self, "dead"):
            self.seen_ids, self.dead = set(), set()
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if scope["method"] == "DELETE" and getattr(self, "slow_delete", 0):
                await asyncio.sleep(self.slow_delete)  # a slow (or dropped) session teardown
            session_id = headers.get(b"mcp-session-id")
            if session_id is not None:
                self.seen_ids.add(session_id)
                if session_id in self.dead:
                    await send({"type": "http.response.start", "status": 404, "headers": []})
                    await send({"type": "http.response.body", "body": b"no such session"})
                    return
            authorization = headers.get(b"authorization", b"").decode()
            if authorization.startswith(ECHO_INIT) and scope["method"] == "POST":
                body = b""
                while True:
                    message = await receive()
                    body += message.get("body", b"")
                    if not message.get("more_body"):
                        break
                request = json.loads(body)
                if "id" in request:
                    answer = {
                        "jsonrpc": "2.0",
                        "id": request["id"],
                        "error": {"code": -32001, "message": f"invalid token: {authorization}"},
                    }
                    data = json.dumps(answer).encode()
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 200,
                            "headers": [(b"content-type", b"application/json")],
                        }
                    )
                    await send({"type": "http.response.body", "body": data})
                else:
                    await send({"type": "http.response.start", "status": 202, "headers": []})
                    await send({"type": "http.response.body", "body": b""})
                return
        await super().__call__(scope, receive, send)

    async def _list(self, ctx: Any, params: Any) -> types.ListToolsResult:
        listed = await super()._list(ctx, params)
        obj = {"type": "object", "properties": {}, "additionalProperties": False}
        listed.tools.append(types.Tool(name="leak_json", description="x", input_schema=obj))
        listed.tools.append(types.Tool(name="leak_encoded", description="x", input_schema=obj))
        listed.tools.append(types.Tool(name="structured", description="x", input_schema=obj))
        listed.tools.append(types.Tool(name="slow", description="x", input_schema=obj))
        return listed

    async def _call(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "slow":  # two seconds, then who called
            self.slow_calls = getattr(self, "slow_calls", 0) + 1
            await asyncio.sleep(2)
            return await super()._call(ctx, params)
        if params.name == "leak_json":
            header = self._header(ctx)
            text = json.dumps({"you_sent": {"authorization": header}})
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        if params.name == "structured":
            header = self._header(ctx)
            echoed = {"count": 3, "ratio": 0.5, "ok": True, "none": None, "sent": [header, 7]}
            return types.CallToolResult(content=[], structured_content=echoed)
        if params.name == "leak_encoded":
            header = self._header(ctx) or ""
            encoded = {
                "query": f"?auth={quote(header, safe='')}&plus={quote_plus(header)}",
                # Basic-style envelopes put it at every alignment of base64's groups of three.
                "base64": [
                    base64.b64encode(f"{pad}user:{header}".encode()).decode()
                    for pad in ("", "x", "xy")
                ],
                "base64url": base64.urlsafe_b64encode(f"u:{header}".encode()).decode(),
            }
            text = json.dumps(encoded)
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        return await super()._call(ctx, params)


@asynccontextmanager
async def gateway(
    backend: Backend, tmp_path: Path, service_secret: str = "service-token-9999", **overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, EchoServer]]:
    async with gateway_app(backend, tmp_path, service_secret, **overrides) as (client, upstream, _):
        yield client, upstream


@asynccontextmanager
async def gateway_app(
    backend: Backend, tmp_path: Path, service_secret: str = "service-token-9999", **overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, EchoServer, Any]]:
    upstream = EchoServer()
    async with running_server(upstream) as upstream_url:
        entry: dict[str, Any] = {
            "name": "creds",
            "transport": "http",
            "url": f"{upstream_url}/mcp",
            "timeout_seconds": 10,
            "connect_timeout_seconds": 3,
            "credential": {"accept": "user_or_service", "service": {"secret": "svc"}},
        }
        settings = test_settings(
            tool_catalogues=catalogue(tmp_path, entry),
            auth="enabled",
            api_tokens=TOKENS,
            operators="root",
            upstream_credential_keys=KEY,
            upstream_secrets={"svc": service_secret},
            data_dir=tmp_path / "data",
            **{**ALLOW_LOOPBACK, **overrides},
        )
        async with open_platform(backend, settings) as platform:
            app = create_app(settings, platform=platform)
            async with running_server(app) as url, httpx.AsyncClient(base_url=url) as client:
                yield client, upstream, app


async def _everything(client: httpx.AsyncClient, backend: Backend, *answers: Any) -> str:
    rows = await audit_rows(backend)
    return json.dumps([*answers, [dict(row._mapping) for row in rows]], default=str)


# --- 1. truncation before scrubbing: a long credential is cut, then no longer matches --------


async def test_a_long_credential_echoed_in_a_tool_error_is_scrubbed_before_the_text_is_cut(
    backend: Backend, tmp_path: Path
):
    """The upstream error text is cut at 500 characters (`_tool_error_text`) BEFORE `scrub`
    looks for the credential: a credential of 600 characters (allowed up to 4096) echoed by
    the upstream no longer matches whole, and its first ~440 characters are answered, stored
    in the audit row and call log."""
    credential = "ada-" + "".join(f"{i:04d}" for i in range(150))  # 604 chars, all distinct
    async with gateway(backend, tmp_path) as (client, _upstream):
        assert (await register(client, "tok-ada", credential)).status_code == 204
        error = await execute(client, "tok-ada", "leak_error")
        everything = await _everything(client, backend, error.json())
    assert error.status_code == 422
    # No 64-character piece of the credential may appear anywhere.
    assert credential[:64] not in everything, error.json()["detail"][:200]


# --- 2. JSON-encoded echo: the credential's text, escaped, passes the scrub ------------------


async def test_a_credential_echoed_json_encoded_is_scrubbed(backend: Backend, tmp_path: Path):
    """A credential may hold `"` and `\\` (visible ASCII). An upstream echoing its request
    headers as JSON text (the common debug/echo shape) writes them escaped; `scrub` looks for
    the raw text only, so the whole credential reaches the answer and the audit row, and the
    reader gets it back with one json.loads."""
    credential = 'ada\\tok"en-0001-secret'
    async with gateway(backend, tmp_path) as (client, _upstream):
        assert (await register(client, "tok-ada", credential)).status_code == 204
        answer = await execute(client, "tok-ada", "leak_json")
    assert answer.status_code == 200, answer.text
    echoed = json.loads(answer.json()["result"])["you_sent"]["authorization"]
    assert credential not in echoed, echoed


async def test_a_credential_echoed_percent_or_base64_encoded_is_scrubbed(
    backend: Backend, tmp_path: Path
):
    """Beyond JSON: an upstream echoing the header in a query string (percent-encoded, ``+``
    for spaces) or inside a base64 envelope (a Basic header, a JWT-like blob), at each of the
    three alignments of base64's groups: none of them may carry the credential back."""
    credential = "ada tok/en+0001?secret=&more"
    async with gateway(backend, tmp_path) as (client, _upstream):
        assert (await register(client, "tok-ada", credential)).status_code == 204
        answer = await execute(client, "tok-ada", "leak_encoded")
        everything = await _everything(client, backend, answer.json())
    assert answer.status_code == 200, answer.text
    echoed = json.loads(answer.json()["result"])
    assert quote(credential, safe="") not in everything
    assert quote_plus(credential) not in everything
    for blob in [*echoed["base64"], echoed["base64url"]]:
        assert "[redacted]" in blob, blob
        # What is left around the redaction holds no piece of the credential worth having.
        decoded = base64.urlsafe_b64decode(blob.replace("[redacted]", "") + "===")
        assert credential.encode() not in decoded
        assert credential[2:-2].encode() not in decoded, blob
    assert "[redacted]" in echoed["query"]


async def test_a_scrubbed_structured_result_keeps_its_numbers_and_booleans(
    backend: Backend, tmp_path: Path
):
    """Scrubbing copies the result: every value that is not a string, object or array was
    left out of the copy (null), so a user's call of a tool with structured content lost its
    numbers and booleans (and broke its output schema)."""
    async with gateway(backend, tmp_path) as (client, _upstream):
        assert (await register(client, "tok-ada", "ada-token-0001")).status_code == 204
        answer = await execute(client, "tok-ada", "structured")
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"] == {
        "count": 3,
        "ratio": 0.5,
        "ok": True,
        "none": None,
        "sent": ["Bearer [redacted]", 7],
    }


# --- 3. the service credential in GET /upstreams last_error, for every signed-in user --------


async def test_the_service_credential_quoted_by_a_failing_handshake_is_not_in_last_error(
    backend: Backend, tmp_path: Path
):
    """An upstream answering `initialize` with an error that quotes the token it was given
    ("invalid token: Bearer ...") is common. `Upstream.run` stores `describe(exc)` as
    `last_error`, which `GET /upstreams` shows to ANY signed-in user: the service credential
    (an operator's secret) is handed to every user. `describe` strips URLs, not headers."""
    service = "echo-init-service-secret-42"
    async with gateway(backend, tmp_path, service_secret=service) as (client, _upstream):
        listed = await client.get("/upstreams", headers=bearer("tok-carol"))
    assert listed.status_code == 200
    assert service not in listed.text, listed.json()["upstreams"][0]["last_error"]


# --- 4. a user's credential logged in clear when their session fails to open -----------------


async def test_a_user_credential_quoted_by_a_failing_session_is_not_logged(
    backend: Backend, tmp_path: Path, json_logs: Any
):
    """`UserSessions._hold` logs `describe(exc)` unscrubbed ("upstream user session ended")
    when the user's session fails: an upstream whose initialize error quotes the token puts
    the user's credential into the gateway's logs (docs: never logged). The answer itself is
    scrubbed, the log line is not."""
    credential = "echo-init-ada-secret-0001"
    async with gateway(backend, tmp_path) as (client, _upstream):
        assert (await register(client, "tok-ada", credential)).status_code == 204
        answer = await execute(client, "tok-ada", "whoami")
        everything = await _everything(client, backend, answer.json())
    assert answer.status_code in (403, 503), answer.text
    assert credential not in everything
    assert credential not in json_logs.getvalue()


async def test_a_long_user_credential_quoted_by_a_failing_session_is_not_answered_in_part(
    backend: Backend, tmp_path: Path
):
    """The same refusal, with a 400-character credential: `describe` cuts its text at 300
    characters before `scrub` runs, so the prefix of the credential is answered to the user
    and written into the audit row / call log (the promise: never audited)."""
    credential = "echo-init-" + "".join(f"{i:03d}" for i in range(130))
    async with gateway(backend, tmp_path) as (client, _upstream):
        assert (await register(client, "tok-ada", credential)).status_code == 204
        answer = await execute(client, "tok-ada", "whoami")
        everything = await _everything(client, backend, answer.json())
    assert answer.status_code in (403, 503), answer.text
    assert credential[:64] not in everything, answer.json().get("detail", "")[:300]


# --- 5. a damaged stored row: TOOL_FAILED instead of "cannot be read; register it again" ------


async def test_a_truncated_ciphertext_row_asks_the_user_to_register_again(
    backend: Backend, tmp_path: Path
):
    """A row whose ciphertext is shorter than the 12-byte nonce (a truncated write, a bad
    migration, a tampered row) makes AESGCM raise ValueError("Nonce must be ..."), not
    InvalidTag: `CredentialCipher.decrypt` lets it through and every call of that user is
    answered 502 TOOL_FAILED "failed unexpectedly" (an unhandled exception in the executor,
    logged as a crash) instead of the documented 403 UPSTREAM_CREDENTIAL_REQUIRED 'register it
    again'."""
    from sqlalchemy import update

    from conclave.gateway.store import upstream_credentials

    async with gateway(backend, tmp_path) as (client, _upstream):
        assert (await register(client, "tok-ada", "ada-token-0001")).status_code == 204
        async with backend.engine.begin() as connection:
            await connection.execute(
                update(upstream_credentials)
                .where(upstream_credentials.c.user_id == "ada")
                .values(ciphertext=b"short")
            )
        answer = await execute(client, "tok-ada", "whoami")
    assert answer.status_code == 403, answer.text
    assert answer.json()["code"] == "UPSTREAM_CREDENTIAL_REQUIRED"


# --- 6. hostile path segments on the operator's delete ---------------------------------------


async def test_operator_delete_with_nul_or_surrogate_user_id_is_never_a_500(
    backend: Backend, tmp_path: Path
):
    """`DELETE /upstreams/{name}/credentials/{user_id}` passes the path's user id straight to
    the store: NUL (PostgreSQL text refuses it) or a lone surrogate must be a 4xx, never 500."""
    async with gateway(backend, tmp_path) as (client, _upstream):
        answers = [
            await client.delete(
                f"/upstreams/creds/credentials/{segment}", headers=bearer("tok-root")
            )
            for segment in ("a%00b", "a%ED%A0%80b", "x" * 8000)
        ]
    assert [a.status_code for a in answers if a.status_code >= 500] == [], [
        (a.status_code, a.text[:200]) for a in answers
    ]


# --- 7. an upstream restart leaves every user's session broken while they keep calling -------


async def test_a_user_session_the_upstream_forgot_is_replaced_and_the_call_succeeds(
    backend: Backend, tmp_path: Path
):
    """An upstream that restarts (a deploy) forgets its sessions and answers 404 to their ids;
    the SDK words that as a JSON-RPC error INVALID_REQUEST "Session terminated". For a user's
    session `UserSessions.call` closes the session only on CONNECTION_CLOSED or a 401/403, so
    the dead session is kept and every further call of that user fails 502, and `last_used` is
    refreshed by each failing call: it is never idle, never replaced. The user is locked out
    until they stop calling for the idle time or re-register their credential. (The shared
    session recovers: its periodic listing fails and the supervisor reconnects.)"""
    async with gateway(backend, tmp_path) as (client, upstream):
        assert (await register(client, "tok-ada", "ada-token-0001")).status_code == 204
        assert (await execute(client, "tok-ada", "whoami")).status_code == 200
        upstream.restart()
        after = [await execute(client, "tok-ada", "whoami") for _ in range(4)]
    codes = [(a.status_code, a.json().get("code")) for a in after]
    # The first call after the restart meets the 404 and fails (the SDK words it as it words the
    # upstream's own -32600: the gateway cannot know the upstream did not run it, so it is not
    # sent twice); the session is replaced and every later call works.
    assert codes == [(502, "UPSTREAM_FAILED")] + [(200, None)] * 3, codes


async def test_a_users_calls_in_flight_finish_when_their_forgotten_session_is_replaced(
    backend: Backend, tmp_path: Path
):
    """Ada's slow call runs on her session when the upstream forgets it (it runs on the calls
    it accepted); her next call meets the 404. Replacing the session closed the old one at once,
    cutting the slow call (502 ``UPSTREAM_CONNECTION_LOST``): the old session is closed once
    its calls have ended."""
    async with gateway(backend, tmp_path) as (client, upstream):
        assert (await register(client, "tok-ada", "ada-token-0001")).status_code == 204
        assert (await execute(client, "tok-ada", "whoami")).status_code == 200
        slow = asyncio.create_task(execute(client, "tok-ada", "slow"))

        async def running() -> bool:
            return getattr(upstream, "slow_calls", 0) == 1

        await eventually(running)
        upstream.restart()
        lost = await execute(client, "tok-ada", "whoami")  # meets the 404: not sent again
        after = await execute(client, "tok-ada", "whoami")
        slow_answer = await slow
    seen = [(a.status_code, a.text[:200]) for a in (lost, after, slow_answer)]
    assert (lost.status_code, lost.json()["code"]) == (502, "UPSTREAM_FAILED"), seen
    assert [a.status_code for a in (after, slow_answer)] == [200, 200], seen
    assert after.json()["result"] == slow_answer.json()["result"], seen  # Ada's credential


# --- 8. closed sessions are not counted: one user holds any number of upstream connections ---


async def test_closing_sessions_count_towards_the_bound_of_user_sessions(
    backend: Backend, tmp_path: Path
):
    """`UserSessions._close` drops a session from the table at once and lets its task end on
    its own: the SDK's teardown (DELETE) runs for up to the upstream's time-out. The bound
    `GATEWAY_UPSTREAM_MAX_USER_SESSIONS` counts only the table, and `close_all` at shutdown
    waits only for the table's tasks. One user replacing their credential and calling, in a
    loop, holds one more upstream connection (task, httpx client, socket) per iteration as
    long as the upstream is slow to answer DELETE: unbounded per-user connections."""
    async with gateway(backend, tmp_path, upstream_max_user_sessions=2) as (client, upstream):
        upstream.slow_delete = 8
        for round_ in range(8):
            credential = f"ada-token-{round_:04d}"
            assert (await register(client, "tok-ada", credential)).status_code == 204
            assert (await execute(client, "tok-ada", "whoami")).status_code == 200
        await asyncio.sleep(0.2)
        alive = [
            task
            for task in asyncio.all_tasks()
            if task.get_name().startswith("upstream creds user session") and not task.done()
        ]
        upstream.slow_delete = 0
    assert len(alive) <= 2, f"{len(alive)} user-session tasks of ONE user alive (bound 2)"


# --- 9. concurrent first registrations: update-then-insert races into a unique violation -----


async def test_concurrent_first_registrations_all_succeed(backend: Backend, tmp_path: Path):
    """`store.put_upstream_credential` is UPDATE, then INSERT when nothing was updated. Two
    PUTs of a user's first credential at once (a double-clicked form, a client retrying) both
    update nothing and both insert (PostgreSQL; SQLite serialises writers): the second hits the
    primary key, an IntegrityError that
    `store_errors` passes on, answered 500."""
    async with gateway(backend, tmp_path) as (client, _upstream):
        for round_ in range(5):
            user_token = "tok-bob"
            await client.delete("/upstreams/creds/credential", headers=bearer(user_token))
            answers = await asyncio.gather(
                *(register(client, user_token, f"bob-token-{round_}-{i:04d}") for i in range(8))
            )
            bad = [(a.status_code, a.text[:200]) for a in answers if a.status_code >= 500]
            assert bad == [], bad


# --- 11. a call racing a DELETE re-opens a session with the deleted credential, kept open ----


async def test_a_call_that_read_a_credential_since_deleted_opens_no_session_with_it(
    backend: Backend, tmp_path: Path
):
    """docs/gateway.md: a user's session is closed "when their credential is replaced or
    deleted". `forget` closed the session present at DELETE time only: a call that had read the
    credential just before (its store read in flight) opened a NEW session with the deleted
    credential after the DELETE answered 204, and kept it open, authenticated as the user, until
    idle. Here the call's two steps are driven one by one: its read of the credential, the
    DELETE, then its session call, which must refuse to open a session with what it read; the
    chain then reads again (and goes on with the service credential)."""
    from conclave.gateway.upstreams.user_sessions import CredentialChanged

    credential = "ada-token-to-delete"
    async with gateway_app(backend, tmp_path) as (client, upstream, app):
        assert (await register(client, "tok-ada", credential)).status_code == 204
        access = app.state.upstreams.accesses["creds"]
        read = await access.presented("ada")  # what a call read before the DELETE
        assert read.kind == "user"
        deleted = await client.delete("/upstreams/creds/credential", headers=bearer("tok-ada"))
        assert deleted.status_code == 204
        with pytest.raises(CredentialChanged):
            await access.sessions.call(
                "ada", read.secret, read.header_value, read.generation, "whoami", {}
            )
        answer = await execute(client, "tok-ada", "whoami")
        await asyncio.sleep(0.2)
        opened = upstream.opened.count(f"Bearer {credential}")
    assert answer.status_code == 200, answer.text
    assert opened == 0, f"{opened} session(s) opened with the deleted credential"
