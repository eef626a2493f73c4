"""Every upstream MCP server of the catalogues: supervised while the gateway serves, their tools
kept in the registry, their state for ``GET /upstreams``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import mcp_types as types

from conclave.gateway.registry import ToolRegistry
from conclave.gateway.upstreams.access import CredentialSettings, UpstreamAccess, access_for
from conclave.gateway.upstreams.config import McpServerSpec, UpstreamLimits
from conclave.gateway.upstreams.connection import Upstream
from conclave.gateway.upstreams.tools import entries_off_loop
from conclave.platform.egress import EgressPolicy

log = logging.getLogger(__name__)

SOURCE_PREFIX = "upstream:"
_STOP_SECONDS = 3.0


class Upstreams:
    """The upstream MCP servers of one gateway process."""

    def __init__(
        self,
        specs: Sequence[McpServerSpec],
        registry: ToolRegistry,
        policy: EgressPolicy,
        limits: UpstreamLimits,
        credentials: CredentialSettings | None = None,
    ) -> None:
        names = [spec.name for spec in specs]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"mcp server {duplicates[0]!r} is declared twice")
        self._registry = registry
        self.upstreams = {spec.name: Upstream(spec, policy, limits, self._listed) for spec in specs}
        settings = credentials or CredentialSettings(vault=None, secrets={})
        self.vault = settings.vault
        self.accesses: dict[str, UpstreamAccess] = {}
        for name, upstream in self.upstreams.items():
            access = access_for(upstream, settings)
            if access is not None:
                self.accesses[name] = access
        self._idle_sweep = min(30.0, max(1.0, settings.user_session_idle_seconds / 4))
        # One listing applied at a time: two refreshes must not interleave their registry edits.
        self._applying = asyncio.Lock()

    async def _listed(
        self, upstream: Upstream, listing: list[types.Tool], notes: list[str]
    ) -> None:
        source = SOURCE_PREFIX + upstream.spec.name
        async with self._applying:
            # Names other tools answer to; this upstream's own current ones are about to go.
            taken = self._registry.names_in_use(besides=source)
            access = self.accesses.get(upstream.spec.name)
            entries, skipped = await entries_off_loop(upstream, listing, taken, access)
            refused = self._registry.replace_source(source, entries)
        upstream.tool_count = len(entries) - len(refused)
        upstream.notes = [*notes, *skipped, *refused]
        if upstream.notes:
            log.warning(
                "upstream listing: %d tools, %d notes",
                upstream.tool_count,
                len(upstream.notes),
                extra={"upstream": upstream.spec.name},
            )

    def status(self) -> list[dict[str, Any]]:
        """Every upstream's state, by name."""
        return [self.upstreams[name].status() for name in sorted(self.upstreams)]

    def forget_user_session(self, server: str, user_id: str) -> None:
        """Close ``user_id``'s session with ``server`` (their credential changed or went)."""
        access = self.accesses.get(server)
        if access is not None and access.sessions is not None:
            access.sessions.forget(user_id)

    async def _sweep_user_sessions(self) -> None:
        while True:
            await asyncio.sleep(self._idle_sweep)
            for access in self.accesses.values():
                if access.sessions is not None:
                    access.sessions.close_idle()

    async def _close_user_sessions(self) -> None:
        await asyncio.gather(
            *(access.sessions.close_all() for access in self.accesses.values() if access.sessions)
        )

    @contextlib.asynccontextmanager
    async def serving(self, *, start_wait_seconds: float) -> AsyncIterator[Upstreams]:
        """Supervise every upstream while the block runs. Waits up to ``start_wait_seconds``
        for each upstream's first connection attempt, so a gateway that starts serves the
        tools of the upstreams that answer at once; a slow or broken one does not hold it."""
        tasks = [
            asyncio.create_task(upstream.run(), name=f"upstream {name}")
            for name, upstream in self.upstreams.items()
        ]
        sweeper = asyncio.create_task(self._sweep_user_sessions(), name="upstream user sessions")
        try:
            if tasks:
                waits = [upstream.ready.wait() for upstream in self.upstreams.values()]
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(start_wait_seconds):
                        await asyncio.gather(*waits)
            yield self
        finally:
            sweeper.cancel()
            await self._close_user_sessions()
            for task in tasks:
                task.cancel()
            if tasks:
                # Bounded: the SDK ends an HTTP session with a DELETE in a ``finally`` that a
                # cancellation does not cut short, so an upstream that never answers it held
                # the gateway's shutdown for its whole time-out (up to 600 s). A stdio process
                # is stopped within its 2 s grace, well inside this bound.
                _, stuck = await asyncio.wait(tasks, timeout=_STOP_SECONDS)
                for task in stuck:
                    log.warning("upstream did not stop in time: %s", task.get_name())
                for task in tasks:
                    if task.done() and not task.cancelled():
                        task.exception()  # retrieved: its failure was logged by the task
