"""Attacks on users' own upstream credentials (outside attacker, branch attack-creds).

Each test states what the product promises (docs/security.md, access.py, credentials.py:
"The plaintext ... is never answered, logged, audited or published") and fails where it
does not hold.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
from starlette.types import Receive, Scope, Send

from conclave.gateway.app import create_app
from conclave.gateway.upstreams.credentials import new_key_text
from tests.conftest import Backend, open_platform, serve_app, test_settings  # noqa: F401
from tests.gateway.conftest import audit_rows
from tests.gateway.upstream_fixtures import ALLOW_LOOPBACK, catalogue
from tests.gateway.upstreams.credential_mcp_server import CredentialServer
from tests.httpserver import running_server

TOKENS = "tok-ada=ada,tok-bob=bob,tok-carol=carol,tok-root=root"
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
        return listed

    async def _call(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "leak_json":
            header = self._header(ctx)
            text = json.dumps({"you_sent": {"authorization": header}})
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        return await super()._call(ctx, params)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def gateway(
    backend: Backend, tmp_path: Path, service_secret: str = "service-token-9999", **overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, EchoServer]]:
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
                yield client, upstream


async def execute(client: httpx.AsyncClient, token: str, tool: str) -> httpx.Response:
    return await client.post(
        "/execute", json={"tool": f"creds__{tool}", "args": {}}, headers=bearer(token)
    )


async def register(client: httpx.AsyncClient, token: str, credential: str) -> httpx.Response:
    return await client.put(
        "/upstreams/creds/credential", json={"credential": credential}, headers=bearer(token)
    )


async def _everything(client: httpx.AsyncClient, backend: Backend, *answers: Any) -> str:
    rows = await audit_rows(backend)
    return json.dumps([*answers, [dict(row._mapping) for row in rows]], default=str)


# --- 1. truncation before scrubbing: a long credential is cut, then no longer matches --------


async def test_attack_long_credential_partly_leaks_through_cut_error_text(
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


async def test_attack_credential_with_quote_or_backslash_leaks_json_encoded(
    backend: Backend, tmp_path: Path
):
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


# --- 3. the service credential in GET /upstreams last_error, for every signed-in user --------


async def test_attack_service_credential_shown_to_every_user_in_last_error(
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


async def test_attack_user_credential_logged_when_their_session_fails_to_open(
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


async def test_attack_long_user_credential_partly_answered_when_session_fails(
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


# --- 5. a damaged stored row: an unexpected TOOL_FAILED instead of "cannot be read; register it again" -----------


async def test_attack_truncated_ciphertext_row_is_an_unexpected_failure(backend: Backend, tmp_path: Path):
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


async def test_attack_operator_delete_with_nul_or_surrogate_user_id(
    backend: Backend, tmp_path: Path
):
    """`DELETE /upstreams/{name}/credentials/{user_id}` passes the path's user id straight to
    the store: NUL (PostgreSQL text refuses it) or a lone surrogate must be a 4xx, never 500."""
    async with gateway(backend, tmp_path) as (client, _upstream):
        answers = [
            await client.delete(f"/upstreams/creds/credentials/{segment}", headers=bearer("tok-root"))
            for segment in ("a%00b", "a%ED%A0%80b", "x" * 8000)
        ]
    assert [a.status_code for a in answers if a.status_code >= 500] == [], [
        (a.status_code, a.text[:200]) for a in answers
    ]


# --- 7. an upstream restart leaves every user's session broken while they keep calling -------


async def test_attack_user_session_stuck_after_upstream_forgets_it(
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
    assert codes[-1][0] == 200, codes


# --- 8. closed sessions are not counted: one user holds any number of upstream connections ---


async def test_attack_one_user_accumulates_closing_sessions_beyond_the_bound(
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


async def test_attack_concurrent_first_registrations_answer_500(backend: Backend, tmp_path: Path):
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


# --- 10. the embedded key file: folder mode, and the start-up race it claims to handle ------


def test_attack_embedded_key_folder_is_not_made_private(tmp_path: Path):
    """docs/security.md: the key is kept "mode 0600, in a folder of mode 0700". The folder is
    `CONCLAVE_DATA_DIR` itself, which already exists (the SQLite database is there): `mkdir(mode=
    0o700, exist_ok=True)` leaves its mode alone and nothing checks it."""
    from conclave.gateway.upstreams.credentials import embedded_key

    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    embedded_key(data / "upstream-credential.key")
    assert data.stat().st_mode & 0o077 == 0, oct(data.stat().st_mode)


def test_attack_embedded_key_second_process_reads_half_created_file(tmp_path: Path):
    """"created exclusively so two processes starting together end with one key": the first
    process creates the file (O_EXCL) and writes the key afterwards; the second one, getting
    FileExistsError in between, reads the still-empty file and refuses to start ("must hold one
    credential key") instead of waiting for the key."""
    import os

    from conclave.gateway.upstreams.credentials import embedded_key

    path = tmp_path / "data" / "upstream-credential.key"
    path.parent.mkdir(mode=0o700)
    # What the first process leaves between os.open(O_CREAT | O_EXCL) and its write.
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    embedded_key(path)  # the second process: must not fail


# --- 11. a call racing a DELETE re-opens a session with the deleted credential, kept open ----


async def test_attack_deleted_credential_keeps_a_session_open_after_a_racing_call(
    backend: Backend, tmp_path: Path, monkeypatch: Any
):
    """docs/gateway.md: a user's session is closed "when their credential is replaced or
    deleted". `forget` closes the session present at DELETE time only: a call that read the
    credential just before (its store read in flight; widened here by a delay after the read)
    opens a NEW session with the deleted credential after the DELETE answered 204, and that
    session stays open, authenticated as the user, with the plaintext in memory, until idle
    (300 s) — nothing will close it since later calls of the user go to the service session.
    Same with a replaced (revoked) credential until the user's next call."""
    from conclave.gateway import store

    original = store.get_upstream_credential
    gate = asyncio.Event()
    slow = {"on": False}

    async def slow_read(engine: Any, server: str, user_id: str) -> Any:
        found = await original(engine, server, user_id)
        if slow["on"]:
            gate.set()
            await asyncio.sleep(0.5)
        return found

    monkeypatch.setattr(store, "get_upstream_credential", slow_read)
    credential = "ada-token-to-delete"
    async with gateway(backend, tmp_path) as (client, upstream):
        assert (await register(client, "tok-ada", credential)).status_code == 204
        slow["on"] = True
        call = asyncio.create_task(execute(client, "tok-ada", "whoami"))
        await gate.wait()
        slow["on"] = False
        deleted = await client.delete("/upstreams/creds/credential", headers=bearer("tok-ada"))
        assert deleted.status_code == 204
        await call
        await asyncio.sleep(1.0)
        opened = upstream.opened.count(f"Bearer {credential}")
        closed = upstream.closed.count(f"Bearer {credential}")
    assert opened == closed, f"{opened - closed} session(s) with the deleted credential still open"
