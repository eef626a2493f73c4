"""The catalogue and the governance chain over the Model Context Protocol, at ``/mcp``.

Official ``mcp`` SDK, low-level server, streamable HTTP, stateless (any replica serves any request)
with JSON responses. ``tools/call`` goes through :meth:`GatewayService.execute` exactly like
``POST /execute``: same validation, audit row, event and metrics. Failures a model can act on
(invalid arguments, tool errors, time-outs) come back as results with ``isError: true``; an unknown
tool is a JSON-RPC error (``-32602``), after being audited like any other call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.types import Receive, Scope, Send

from conclave import __version__
from conclave.gateway.service import ExecuteCommand, GatewayService
from conclave.gateway.tools import Tool
from conclave.platform.auth import Authenticator, Principal
from conclave.platform.errors import ConclaveError, Unauthorized
from conclave.platform.logs import correlation_id_var
from conclave.platform.problems import error_response

MCP_PATH = "/mcp"


def _mcp_tool(tool: Tool) -> types.Tool:
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        inputSchema=dict(tool.parameters),
        outputSchema=dict(tool.output_schema) if tool.output_schema else None,
        annotations=types.ToolAnnotations(**tool.annotations) if tool.annotations else None,
    )


def create_mcp_server(service: Callable[[], GatewayService]) -> Server[Any]:
    """An MCP server whose handlers use the gateway service returned by ``service``."""

    async def list_tools(
        _ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_mcp_tool(t) for t in service().registry.tools()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        principal: Principal = ctx.request.scope["state"]["principal"]
        gateway = service()
        try:
            outcome = await gateway.execute(
                ExecuteCommand(
                    tool=params.name,
                    args=params.arguments if params.arguments is not None else {},
                    user_id=principal.user_id,
                    correlation_id=correlation_id_var.get(),
                )
            )
        except ConclaveError as exc:  # refused before the chain: rate limit, store down
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"{exc.code}: {exc.detail}")],
                structuredContent={"code": exc.code, **exc.extra},
                isError=True,
            )
        if outcome.error_code == "UNKNOWN_TOOL":
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        if outcome.http_status >= 400:
            detail = outcome.error_message or outcome.error_code or "the call failed"
            if outcome.errors:
                fields = "; ".join(f"{e['field']}: {e['message']}" for e in outcome.errors)
                detail = f"{detail} {fields}"
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"{outcome.error_code}: {detail}")],
                structuredContent={
                    "conclave_id": outcome.conclave_id,
                    "code": outcome.error_code,
                    "orthodoxy_status": outcome.orthodoxy_status,
                },
                isError=True,
            )
        text = json.dumps(outcome.result, ensure_ascii=False)
        structured = outcome.result if isinstance(outcome.result, dict) else None
        meta = {
            "conclave_id": outcome.conclave_id,
            "orthodoxy_status": outcome.orthodoxy_status,
            "warnings": outcome.warnings,
        }
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structuredContent=structured,
            _meta={"conclave": meta},
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


class McpEndpoint:
    """ASGI endpoint at ``/mcp``: authenticate like every other route, then hand to the SDK."""

    def __init__(self, authenticator: Authenticator) -> None:
        self._authenticator = authenticator
        self.manager: StreamableHTTPSessionManager | None = None  # set when the app starts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            principal = self._authenticator.authenticate(headers.get("authorization"))
        except Unauthorized as exc:
            await error_response(exc, MCP_PATH)(scope, receive, send)
            return
        if self.manager is None:
            raise RuntimeError("the gateway app has not started")
        scope.setdefault("state", {})["principal"] = principal
        await self.manager.handle_request(scope, receive, send)
