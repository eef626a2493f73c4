"""An MCP server over streamable HTTP (the MCP SDK's server API) that checks and records the
credential each request carries, for the tests of users' upstream credentials.

- every ``tools/list`` and ``tools/call`` records ``(method, Authorization header)`` (or the
  header it is told to) in :attr:`CredentialServer.seen`;
- a request whose ``Authorization`` is ``Bearer revoked-…`` is answered HTTP 401, as an upstream
  answers a revoked token; ``Bearer broken-…`` gets a 500 whose body is the header;
- the sessions opened and closed are recorded with the Authorization they carried;
- ``whoami`` answers the SHA-256 of the header it saw (the gateway scrubs the credential's own
  text from results, a digest passes);
- ``leak_error`` answers ``isError`` with the header in its text, ``leak_result`` the header as
  its result: an upstream that echoes its request headers.
"""

from __future__ import annotations

import hashlib
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from starlette.types import ASGIApp, Receive, Scope, Send

OBJECT = {"type": "object", "properties": {}, "additionalProperties": False}
REVOKED = "Bearer revoked-"
BROKEN = "Bearer broken-"


def digest(header: str | None) -> str:
    """What ``whoami`` answers for ``header``."""
    return hashlib.sha256((header or "").encode()).hexdigest()


class CredentialServer:
    """The server, its ASGI app and what it saw."""

    def __init__(self, header: str = "authorization") -> None:
        self.header = header
        """The request header recorded (and echoed)."""
        self.seen: list[tuple[str, str | None]] = []
        self.opened: list[str | None] = []
        """The Authorization of each session opened (an ``initialize`` without a session id)."""
        self.closed: list[str | None] = []
        """The Authorization of each session ended by its client (``DELETE``)."""
        server = Server(
            "credentials", version="0", on_list_tools=self._list, on_call_tool=self._call
        )
        self._mcp = server.streamable_http_app()

    def calls(self) -> list[str | None]:
        """The Authorization header of every ``tools/call``, in order."""
        return [header for method, header in self.seen if method == "tools/call"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            authorization = headers.get(b"authorization", b"").decode()
            if authorization.startswith(REVOKED):
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"revoked"})
                return
            if authorization.startswith(BROKEN):
                await send({"type": "http.response.start", "status": 500, "headers": []})
                await send({"type": "http.response.body", "body": authorization.encode()})
                return
            if scope["method"] == "POST" and b"mcp-session-id" not in headers:
                self.opened.append(authorization or None)
            if scope["method"] == "DELETE":
                self.closed.append(authorization or None)
        app: ASGIApp = self._mcp
        await app(scope, receive, send)

    def _header(self, ctx: Any) -> str | None:
        request = ctx.request
        return None if request is None else request.headers.get(self.header)

    async def _list(
        self, ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self.seen.append(("tools/list", self._header(ctx)))
        tools = [
            types.Tool(name=name, description=name, input_schema=OBJECT)
            for name in ("whoami", "leak_error", "leak_result")
        ]
        return types.ListToolsResult(tools=tools)

    async def _call(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        header = self._header(ctx)
        self.seen.append(("tools/call", header))
        if params.name == "leak_error":
            text = f"unauthorised for this tool; you sent Authorization: {header}"
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=text)], is_error=True
            )
        if params.name == "leak_result":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"headers: {header}")],
                structured_content={"authorization": header, "echo": [{"h": header}]},
            )
        return types.CallToolResult(content=[types.TextContent(type="text", text=digest(header))])
