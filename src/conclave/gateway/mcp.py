"""The catalogue and the governance chain over the Model Context Protocol, at ``/mcp``.

Official ``mcp`` SDK, low-level server, streamable HTTP, stateless (any replica serves any request)
with JSON responses (an event stream for a call that asked for progress: :mod:`mcp_relay`).
``tools/call`` goes through :meth:`GatewayService.execute` exactly like ``POST /execute``: same
validation, audit row, event and metrics. Failures a model can act on (invalid arguments, unsafe
values, tool errors, time-outs) come back as results with ``isError: true`` (details in text and
``_meta``, never ``structuredContent``); an unknown tool is a JSON-RPC error (``-32602``), after
being audited like any other call. Answers hold only the fields of the negotiated protocol
version (:mod:`mcp_versions`); transport refusals are JSON-RPC errors (:mod:`mcp_refusals`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http import REQUEST_CANCELLED
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from conclave import __version__
from conclave.gateway.call_log import receipt_path
from conclave.gateway.formats import render
from conclave.gateway.mcp_cancel_relay import CancelRelay
from conclave.gateway.mcp_refusals import (
    invalid_request_id,
    json_rpc_refusals,
    unsupported_media_type,
    unsupported_version,
)
from conclave.gateway.mcp_relay import (
    REQUEST_CALLS,
    Actor,
    Found,
    InFlightCalls,
    RequestCalls,
    cancel_on_disconnect,
    cancelled_id,
    create_streaming_manager,
    progress_token,
    wants_event_stream,
)
from conclave.gateway.mcp_requests import json_object, plain_request
from conclave.gateway.mcp_versions import (
    SUPPORTED_VERSIONS,
    call_result_fields_too_new,
    tool_for_version,
)
from conclave.gateway.outcome import Outcome
from conclave.gateway.policy import listable, subject_of
from conclave.gateway.progress import Progress, ProgressRelay, ProgressReporter
from conclave.gateway.service import ExecuteCommand, GatewayService
from conclave.platform.auth import ACTING_USER_HEADER, Authenticator, Principal
from conclave.platform.errors import ConclaveError, Forbidden, Unauthorized, Unavailable
from conclave.platform.inputs import (
    UnsafeInput,
    escape_text,
    escape_unsafe,
    find_unsafe,
)
from conclave.platform.jsontext import compact_text
from conclave.platform.logs import correlation_id_var
from conclave.platform.middleware import replay_body
from conclave.platform.problem_types import ProblemCode
from conclave.platform.problems import error_response

MCP_PATH = "/mcp"
log = logging.getLogger(__name__)


class McpHandlers:
    """What ``tools/list`` and ``tools/call`` answer, for the SDK's server and the fast path,
    shaped for the protocol ``version`` the request negotiated (see :mod:`mcp_versions`)."""

    def __init__(self, service: GatewayService) -> None:
        self._service = service
        self.in_flight = InFlightCalls()
        self.relay: CancelRelay | None = None
        """Tells the other gateway processes of a cancellation whose call does not run here
        (set by the app once the relay runs)."""

    def cancel(self, principal: Principal, message: dict[str, Any] | None) -> None:
        """Cancel the call a ``notifications/cancelled`` of ``principal`` names: here if it runs
        here, else on the replica that runs it (through :attr:`relay`)."""
        request_id = cancelled_id(message)
        if request_id is None:
            return
        actor = actor_of(principal)
        found = self.in_flight.cancel_id(actor, request_id)
        if found is Found.NOT_HERE and self.relay is not None:
            self.relay.relay(actor, request_id)

    def list_tools(self, principal: Principal, version: str) -> types.ListToolsResult:
        # The entries of GET /tools?format=mcp: wire aliases for names model providers refuse,
        # and only the tools the caller may list.
        service = self._service
        shown = listable(
            service.policy, service.registry, subject_of(principal), service.registry.tools()
        )
        tools = [tool_for_version(render(tool, "mcp"), version) for tool in shown]
        return types.ListToolsResult.model_validate({"tools": tools}, by_name=False)

    async def call_tool(
        self,
        principal: Principal,
        params: types.CallToolRequestParams,
        version: str,
        *,
        request_id: str | int | None = None,
        progress: ProgressReporter | None = None,
        request: RequestCalls | None = None,
    ) -> types.CallToolResult:
        """Run the call through the governance chain; raises ``MCPError`` for an unknown tool,
        and ``-32800`` when the client cancelled request ``request_id`` (:mod:`mcp_relay`)."""
        if request_id is None:
            return await self._call_tool(principal, params, version, progress)
        result = None
        with self.in_flight.running(actor_of(principal), request_id, request):
            result = await self._call_tool(principal, params, version, progress)
        if result is None:  # the scope caught its cancellation: the chain recorded it
            raise MCPError(REQUEST_CANCELLED, "Request cancelled")
        return result

    async def _call_tool(
        self,
        principal: Principal,
        params: types.CallToolRequestParams,
        version: str,
        progress: ProgressReporter | None,
    ) -> types.CallToolResult:
        arguments = params.arguments if params.arguments is not None else {}
        command = ExecuteCommand(
            tool=params.name,
            args=arguments,
            user_id=principal.user_id,
            correlation_id=correlation_id_var.get(),
            roles=principal.roles,
            progress=progress,
            on_behalf_of=principal.on_behalf_of,
        )
        # As POST /execute: a value no store, bus or answer can carry is refused and audited
        # (escaped), whichever path (fast or SDK) parsed the request.
        unsafe = find_unsafe({"name": params.name, "arguments": arguments})
        try:
            if unsafe is None:
                outcome = await self._service.execute(command)
            else:
                escaped = replace(
                    command, tool=escape_text(params.name)[:256], args=escape_unsafe(arguments)
                )
                outcome = await self._service.refuse_unsafe(escaped, UnsafeInput(unsafe))
        except ConclaveError as exc:  # refused before the chain: rate limit, store down
            return _error_result(f"{exc.code}: {exc.detail}", {**exc.extra, "code": exc.code})
        if outcome.error_code == ProblemCode.UNKNOWN_TOOL:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        if outcome.http_status >= 400:
            detail = outcome.error_message or outcome.error_code or "the call failed"
            fields = "; ".join(
                f"{e['field']}: {e['message']}"
                for e in outcome.errors or []
                if f"{e['field']}: {e['message']}" not in detail
            )
            if fields:
                detail = f"{detail} {fields}"
            conclave = {
                "conclave_id": outcome.conclave_id,
                "code": outcome.error_code,
                "orthodoxy_status": outcome.orthodoxy_status,
                **_receipt_meta(outcome),
            }
            return _error_result(f"{outcome.error_code}: {detail}", conclave)
        text = json.dumps(outcome.result, ensure_ascii=False)
        # The chain checked the result against the tool's output schema (after its rules too),
        # and only an object schema is declared over MCP (formats.render): an object result is
        # valid structured content; anything else travels as text only.
        structured = outcome.result if isinstance(outcome.result, dict) else None
        if "structuredContent" in call_result_fields_too_new(version):
            structured = None
        meta = {
            "conclave_id": outcome.conclave_id,
            "orthodoxy_status": outcome.orthodoxy_status,
            "warnings": outcome.warnings,
            **_receipt_meta(outcome),
        }
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=structured,
            _meta={"conclave": meta},
        )


def _receipt_meta(outcome: Outcome) -> dict[str, Any]:
    """The call's place in the transparency log ``calls``, for ``_meta.conclave`` (MCP has no
    field of its own for it)."""
    if outcome.log_leaf_hash is None:
        return {}
    return {
        "log_leaf_hash": outcome.log_leaf_hash.hex(),
        "receipt": receipt_path(outcome.log_leaf_hash),
    }


def _error_result(text: str, conclave: dict[str, Any]) -> types.CallToolResult:
    """An ``isError`` result every client accepts: the details go in the text and in ``_meta``.

    Never ``structuredContent``: the TypeScript SDK checks it against the tool's output schema even
    on errors, and an error's fields do not match a success's schema."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        is_error=True,
        _meta={"conclave": conclave},
    )


def create_mcp_server(handlers: McpHandlers) -> Server[Any]:
    """An MCP server (the SDK's low-level server) answering with ``handlers``."""

    async def list_tools(
        ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        principal = ctx.request.scope["state"]["principal"]
        return handlers.list_tools(principal, ctx.protocol_version)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        state = ctx.request.scope["state"]
        principal, request = state["principal"], state.get(REQUEST_CALLS)
        token = progress_token(ctx.params)
        if token is None:
            return await handlers.call_tool(
                principal, params, ctx.protocol_version, request_id=ctx.request_id, request=request
            )

        async def notify(update: Progress) -> None:
            await ctx.session.send_progress_notification(
                token,
                update.progress,
                update.total,
                update.message,
                related_request_id=ctx.request_id,
            )

        async with ProgressRelay(notify) as relay:
            return await handlers.call_tool(
                principal,
                params,
                ctx.protocol_version,
                request_id=ctx.request_id,
                progress=relay.report,
                request=request,
            )

    return Server(
        "conclave-gateway",
        version=__version__,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def create_session_manager(
    server: Server[Any], allowed_hosts: list[str]
) -> StreamableHTTPSessionManager:
    """Stateless JSON session manager; ``allowed_hosts`` guards against DNS rebinding."""
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=bool(allowed_hosts),
        allowed_hosts=allowed_hosts,
        allowed_origins=[f"http://{host}" for host in allowed_hosts]
        + [f"https://{host}" for host in allowed_hosts],
    )
    return StreamableHTTPSessionManager(
        app=server, json_response=True, stateless=True, security_settings=security
    )


@dataclass(frozen=True, slots=True)
class _Running:
    """What the endpoint answers with while the app runs."""

    authenticator: Authenticator
    handlers: McpHandlers
    manager: StreamableHTTPSessionManager
    streaming: StreamableHTTPSessionManager
    """Answers a ``tools/call`` with a progress token as an event stream (:mod:`mcp_relay`)."""
    security: TransportSecurityMiddleware


Challenge = Callable[[Request, ConclaveError], ConclaveError]
"""Adds what a refusal of ``/mcp`` tells the client about authorization (the OAuth resource
metadata URL of :mod:`conclave.gateway.protected_resource`)."""


def _unchanged(_request: Request, error: ConclaveError) -> ConclaveError:
    return error


class McpEndpoint:
    """ASGI endpoint at ``/mcp``: authenticate like every other route, then answer.

    The SDK's stateless transport builds a server session (task group, memory streams, a
    dispatcher) for every request, which costs more than the governed call behind it. So a plain
    stateless JSON request for ``tools/call`` or ``tools/list`` (the traffic of a working agent) is
    answered here: the SDK's own types parse the parameters and serialise the result, the same
    handlers answer, and the wire format is the SDK's (a test holds the two paths equal). Anything
    else (``initialize``, notifications, batches, GET streams, the 2026 per-request protocol,
    malformed messages, requests its transport-security check refuses) goes to the SDK as is; a
    ``tools/call`` asking for progress goes to a second SDK session manager that answers with an
    event stream. A ``notifications/cancelled`` cancels the call it names first (:mod:`mcp_relay`).
    With the fast path turned off, a plain ``tools/call`` holding an unsafe value is still answered
    here, so that its refusal is audited like any other.
    """

    def __init__(self, *, fast_path: bool = True, challenge: Challenge = _unchanged) -> None:
        self._fast_path = fast_path
        self._challenge = challenge
        self._running: _Running | None = None

    @asynccontextmanager
    async def serving(
        self, authenticator: Authenticator, handlers: McpHandlers
    ) -> AsyncIterator[None]:
        """Answer with ``handlers`` while the block runs (the app's lifespan)."""
        # A session manager runs once: every start of the app gets a new one.
        # No Host/Origin check of the SDK's own: the platform's guard has checked both on every
        # route, /mcp included, answering refusals as problem+json (GATEWAY_MCP_ALLOWED_HOSTS is
        # merged into its allowed hosts).
        server = create_mcp_server(handlers)
        manager = create_session_manager(server, [])
        streaming = create_streaming_manager(server, manager.security_settings)
        security = TransportSecurityMiddleware(manager.security_settings)
        async with manager.run(), streaming.run():
            self._running = _Running(authenticator, handlers, manager, streaming, security)
            try:
                yield
            finally:
                self._running = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        running = self._running
        if running is None:
            raise RuntimeError("the gateway app has not started")
        request = Request(scope, receive)
        try:
            headers = request.headers
            principal = await running.authenticator.authenticate_async(
                headers.get("authorization"), headers.get(ACTING_USER_HEADER)
            )
        except (Unauthorized, Unavailable) as exc:
            challenged = self._challenge(request, exc)
            await error_response(challenged, MCP_PATH)(scope, receive, send)
            return
        except Forbidden as exc:  # an acting user the caller may not name
            await error_response(exc, MCP_PATH)(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        version = request.headers.get("mcp-protocol-version")
        if version is not None and version not in SUPPORTED_VERSIONS:
            # The SDK would route it to the 2026 entry, which words it as a missing envelope.
            await unsupported_version(version)(scope, receive, send)
            return
        if scope["method"] == "POST":
            refusal = unsupported_media_type(request.headers.get("content-type"))
            if refusal is not None:
                await refusal(scope, receive, send)
                return
            body = await request.body()
            message = json_object(body)
            # A notification is answered by the SDK (202) once the call it names is cancelled
            # here, or the other replicas are told of it.
            running.handlers.cancel(principal, message)
            # A call holding an unsafe value is answered (and audited) by the fast path's refusal.
            streaming = wants_event_stream(request, message) and find_unsafe(message) is None
            if not streaming and await self._answer(running, request, message, principal, send):
                return
            refusal = invalid_request_id(message)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
            manager = running.streaming if streaming else running.manager
            if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:

                async def answer(watched: Receive) -> None:
                    await manager.handle_request(
                        scope, replay_body(body, watched), json_rpc_refusals(send)
                    )

                await cancel_on_disconnect(scope, receive, answer)
                return
            receive = replay_body(body, receive)
            await manager.handle_request(scope, receive, json_rpc_refusals(send))
            return
        await running.manager.handle_request(scope, receive, json_rpc_refusals(send))

    async def _answer(
        self,
        running: _Running,
        request: Request,
        message: dict[str, Any] | None,
        principal: Principal,
        send: Send,
    ) -> bool:
        """Answer a plain stateless ``tools/call``/``tools/list``; False leaves it to the SDK."""
        plain = plain_request(request, message)
        if plain is None:
            return False
        request_id, method, params, version = plain
        # Without the fast path, only a call holding an unsafe value is answered here: the SDK's
        # parser refuses a lone surrogate as a parse error, before the call could be audited.
        if not self._fast_path and (method != "tools/call" or find_unsafe(params) is None):
            return False
        if await running.security.validate_request(request, is_post=True) is not None:
            return False
        call = None
        if method == "tools/call":
            try:
                call = types.CallToolRequestParams.model_validate(params, by_name=False)
            except ValidationError:
                return False  # nothing ran yet: the SDK words the error
        # From here the call runs exactly once, whatever happens next.
        try:
            if call is None:
                result: Any = running.handlers.list_tools(principal, version)
            else:
                result = await running.handlers.call_tool(
                    principal, call, version, request_id=request_id
                )
            dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            # The SDK's own sieve: what this protocol version's result schema holds.
            dumped = methods.serialize_server_result(method, version, dumped)
        except MCPError as exc:
            error = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=exc.error)
            answer = error.model_dump_json(by_alias=True, exclude_unset=True)
        except ValidationError:  # a result the protocol cannot carry, answered as the SDK does
            log.exception("MCP %s produced a result its protocol version cannot carry", method)
            invalid = types.ErrorData(
                code=types.INTERNAL_ERROR, message="Handler returned an invalid result"
            )
            error = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=invalid)
            answer = error.model_dump_json(by_alias=True, exclude_unset=True)
        else:
            reply = {"jsonrpc": "2.0", "id": request_id, "result": dumped}
            answer = compact_text(reply)
        response = Response(answer, media_type="application/json")
        await response(request.scope, _no_more_body, send)
        return True


def actor_of(principal: Principal) -> Actor:
    """Who runs ``principal``'s calls (:data:`conclave.gateway.mcp_relay.Actor`)."""
    return principal.user_id, principal.on_behalf_of


async def _no_more_body() -> Message:
    return {"type": "http.disconnect"}
