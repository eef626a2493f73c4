"""Opening a session with an upstream MCP server: over HTTP (the SDK's streamable HTTP client on
the gateway's guarded httpx client), over stdio (the SDK's client on the gateway's own stdio
transport), and the direct path's calls on an HTTP session that answered ``initialize`` with
JSON. :class:`conclave.gateway.upstreams.connection.Upstream` keeps a session open with these."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import mcp_types as types
from mcp.client.session import ClientSession, MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT

from conclave import __version__
from conclave.gateway.progress import ProgressReporter
from conclave.gateway.upstreams.config import McpServerSpec
from conclave.gateway.upstreams.inbound import GuardedReadStream
from conclave.gateway.upstreams.session_answers import json_typed, session_refused
from conclave.gateway.upstreams.stdio import StdioProcess, stdio_transport
from conclave.platform.egress import EgressPolicy
from conclave.platform.egress_mcp import guarded_mcp_client

if TYPE_CHECKING:
    from conclave.gateway.upstreams.direct_calls import DirectCalls

CLIENT = types.Implementation(name="conclave-gateway", version=__version__)


@asynccontextmanager
async def open_http_session(
    spec: McpServerSpec,
    policy: EgressPolicy,
    max_message_bytes: int,
    headers: dict[str, str],
    message_handler: MessageHandlerFnT | None = None,
    on_response: Callable[[httpx2.Response], None] | None = None,
    *,
    max_connections: int,
) -> AsyncIterator[ClientSession]:
    """An initialised session with the HTTP upstream ``spec``, every request carrying
    ``headers``, over at most ``max_connections`` at once; ``on_response`` sees each HTTP answer
    (the SDK words a 401 like a 500)."""
    assert spec.url is not None
    async with AsyncExitStack() as stack:
        client = guarded_mcp_client(
            policy,
            headers=headers,
            connect_timeout=spec.connect_timeout_seconds,
            read_timeout=spec.timeout_seconds,
            max_answer_bytes=max_message_bytes,
            max_connections=max_connections,
        )
        if on_response is not None:

            async def seen(response: httpx2.Response) -> None:
                if session_refused(response) and json_typed(response):
                    # Read (capped, as every answer; the SDK reads it again from memory) to
                    # tell the upstream's own error for this request from a lost session;
                    # within the connect time-out, and a body that cannot be read is the
                    # session's loss (an outside attack: a read error escaped the hook and
                    # ended the SDK's writer, and the session was never marked lost).
                    with contextlib.suppress(httpx2.HTTPError, TimeoutError):
                        async with asyncio.timeout(spec.connect_timeout_seconds):
                            await response.aread()
                on_response(response)

            client.event_hooks["response"].append(seen)
        await stack.enter_async_context(client)
        streams = await stack.enter_async_context(
            streamable_http_client(
                spec.url, http_client=client, max_sse_event_size=max_message_bytes
            )
        )
        yield await _initialised(stack, streams, spec, message_handler)


@asynccontextmanager
async def open_stdio_session(
    spec: McpServerSpec,
    process: StdioProcess,
    max_message_bytes: int,
    message_handler: MessageHandlerFnT | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialised session with the stdio upstream ``spec``, run as ``process``."""
    async with AsyncExitStack() as stack:
        streams = await stack.enter_async_context(
            stdio_transport(spec, process, max_line_bytes=max_message_bytes)
        )
        yield await _initialised(stack, streams, spec, message_handler)


def direct_calls_for(
    spec: McpServerSpec,
    policy: EgressPolicy,
    max_message_bytes: int,
    session: ClientSession,
    headers: dict[str, str],
    answer: httpx2.Response | None,
    *,
    max_connections: int,
    on_session_lost: Callable[[], None],
) -> DirectCalls | None:
    """Direct calls on ``session`` when the upstream answered ``initialize`` (``answer``) with
    JSON."""
    content_type = answer.headers.get("content-type", "") if answer is not None else ""
    if not content_type.lower().startswith("application/json"):
        return None
    assert answer is not None and spec.url is not None
    from conclave.gateway.upstreams.direct_calls import DirectCalls

    session_headers = dict(headers)
    if session_id := answer.headers.get("mcp-session-id"):
        session_headers["mcp-session-id"] = session_id
    if session.protocol_version is not None:
        session_headers["mcp-protocol-version"] = session.protocol_version
    return DirectCalls(
        str(answer.request.url),  # where `initialize` was answered, after any redirect
        session_headers,
        policy,
        timeout_seconds=spec.timeout_seconds,
        connect_timeout_seconds=spec.connect_timeout_seconds,
        max_answer_bytes=max_message_bytes,
        max_connections=max_connections,
        on_session_lost=on_session_lost,
    )


def progress_callback(report: ProgressReporter) -> ProgressFnT:
    # The SDK awaits it in the session's own receive loop: it must not wait (the reporter
    # never does), or a slow caller would hold up every call on this connection.
    async def forward(progress: float, total: float | None, message: str | None) -> None:
        report(progress, total, message)

    return forward


async def _initialised(
    stack: AsyncExitStack,
    streams: Any,
    spec: McpServerSpec,
    message_handler: MessageHandlerFnT | None,
) -> ClientSession:
    """The SDK's session over a transport's ``streams`` (read guarded), held by ``stack``, once
    its ``initialize`` was answered within the connect time-out."""
    read, write = streams
    session = await stack.enter_async_context(
        ClientSession(
            GuardedReadStream(read),
            write,
            message_handler=message_handler,
            client_info=CLIENT,
        )
    )
    with anyio.fail_after(spec.connect_timeout_seconds):
        await session.initialize()
    return session
