"""An upstream (the JSON MCP test server) that answers 404 to ``tools/call`` on sessions it
chose to "forget", as an upstream that restarted or expired them does, for the attack tests of
a9247be (a direct call that meets a 404 is made again on the supervisor's new session)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import Receive, Scope, Send

from conclave.platform.middleware import replay_body
from tests.gateway.upstreams.json_mcp_server import JsonServer, read_body


class ForgetfulServer(JsonServer):
    """``forget_all``: every session is answered 404 on ``tools/call`` (an upstream that loses
    each session at once); ``forgotten``: the sessions answered so (an upstream that restarted);
    ``slow_list_seconds``: ``tools/list`` takes that long (the supervisor is busy listing);
    ``refuse_initialize``: ``initialize`` is answered 503 (no new session opens)."""

    def __init__(self) -> None:
        super().__init__(json_response=True)
        self.forgotten: set[str] = set()
        self.forget_all = False
        self.answered_404 = 0
        self.slow_list_seconds = 0.0
        self.refuse_initialize = False
        self.listing = asyncio.Event()
        """Set when a slow ``tools/list`` starts (the gateway's supervisor is busy listing)."""

    async def _list(self, ctx: Any, params: Any) -> Any:
        if self.slow_list_seconds:
            self.listing.set()
            await asyncio.sleep(self.slow_list_seconds)
        return await super()._list(ctx, params)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await super().__call__(scope, receive, send)
            return
        body = await read_body(receive)
        headers = dict(scope["headers"])
        session = (headers.get(b"mcp-session-id") or b"").decode() or None
        message = json.loads(body)
        forgotten = self.forget_all or session in self.forgotten
        if message.get("method") == "initialize" and self.refuse_initialize:
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if message.get("method") == "tools/call" and session is not None and forgotten:
            self.requests.append(("tools/call", message.get("id"), session, None))
            self.answered_404 += 1
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await super().__call__(scope, replay_body(body, receive), send)
