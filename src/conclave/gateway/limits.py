"""Call limits: per-user and per-tool rate limits, argument size, per-tool concurrency.

Calls refused by a rate or concurrency limit are answered 429 with ``Retry-After`` and are not
audited or published: they never entered the chain, and auditing them would let a flood of refused
calls write a flood of rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

from conclave.gateway.tools import Tool
from conclave.platform.errors import RateLimited
from conclave.platform.jsontext import json_encoder
from conclave.platform.problem_types import ProblemCode
from conclave.platform.ratelimit import Rate, RateLimiter, enforce

# Made once: json.dumps builds an encoder per call when given options.
_size_text = json_encoder(separators=(",", ":"), default=str, same_errors=True)
_UNLIMITED: AbstractAsyncContextManager[None] = nullcontext()


class CallLimits:
    """The limits one gateway process applies before a call runs."""

    def __init__(
        self, limiter: RateLimiter, *, user_rate: Rate | None, max_args_bytes: int
    ) -> None:
        self._limiter = limiter
        self._user_rate = user_rate
        self.max_args_bytes = max_args_bytes
        self._slots: dict[str, asyncio.Semaphore] = {}

    async def admit_user(self, user_id: str) -> None:
        """429 when ``user_id`` has used up its calls."""
        await enforce(self._limiter, f"user:{user_id}", self._user_rate, "your calls")

    async def admit_tool(self, tool: Tool) -> None:
        """429 when ``tool`` has used up its calls (all users together)."""
        await enforce(self._limiter, f"tool:{tool.name}", tool.rate_limit, f"tool {tool.name!r}")

    def args_too_large(self, args: Any) -> bool:
        """True when ``args`` serialise to more than ``max_args_bytes``."""
        size = len(_size_text(args).encode())
        return size > self.max_args_bytes

    def slot(self, tool: Tool) -> AbstractAsyncContextManager[None]:
        """Hold one of ``tool``'s execution slots; 429 ``TOOL_BUSY`` when none is free."""
        if tool.max_concurrency is None:
            return _UNLIMITED  # most tools: no generator-based context manager per call
        return self._held_slot(tool)

    @asynccontextmanager
    async def _held_slot(self, tool: Tool) -> AsyncIterator[None]:
        assert tool.max_concurrency is not None
        semaphore = self._slots.setdefault(tool.name, asyncio.Semaphore(tool.max_concurrency))
        if semaphore.locked():
            raise RateLimited(
                f"Tool {tool.name!r} is running {tool.max_concurrency} calls already.",
                code=ProblemCode.TOOL_BUSY,
                headers={"Retry-After": "1"},
            )
        async with semaphore:
            yield
