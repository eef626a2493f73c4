"""The tool policy follows its catalogue files while the gateway runs: :class:`PolicyReloader`.

The files of ``GATEWAY_TOOL_CATALOGUES`` are looked at every ``GATEWAY_POLICY_RELOAD_SECONDS``
(and at once on ``SIGHUP``); when one changed, all are read again and their ``policy:`` sections
become the policy every later listing and call is judged by. Every replica does the same with its
copy of the files, so a deployment changes who may do what by changing one file, without a
restart. A file that no longer reads (half written, invalid, a role nobody declared, missing)
changes nothing: the policy in force stays, and the refusal is logged once per change of the
files. So does a change that leaves no policy at all (no rule, no default) where one was in force:
that would let everyone list and call everything. Only the policy follows: tools and upstream
servers are still read at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from conclave.gateway.backends.catalogue import load_catalogue
from conclave.gateway.policy import PolicySpec, ToolPolicy

log = logging.getLogger(__name__)

Stamp = tuple[tuple[int, int, int, int] | None, ...]
"""What the files look like from outside (inode, size, modification and change times; None
for a file that cannot be looked at): when it changes, they are read again."""


def _stamp(paths: Sequence[Path]) -> Stamp:
    stamps: list[tuple[int, int, int, int] | None] = []
    for path in paths:
        try:
            found = os.stat(path)
        except OSError:
            stamps.append(None)
            continue
        stamps.append((found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns))
    return tuple(stamps)


class PolicyReloader:
    """Reads the policy of ``paths`` (after the ``fixed`` catalogues' sections, as at start)
    again whenever the files change, and hands each new policy to ``apply``."""

    def __init__(
        self,
        paths: Sequence[Path],
        known_roles: frozenset[str],
        fixed: Sequence[PolicySpec | None],
        apply: Callable[[ToolPolicy], None],
        *,
        interval: float,
        configured: bool,
    ) -> None:
        self._configured = configured
        self._paths = list(paths)
        self._roles = known_roles
        self._fixed = list(fixed)
        self._apply = apply
        self._interval = interval
        self._seen = _stamp(self._paths)
        self._wake = asyncio.Event()
        self.reloads = 0
        """Policies applied since start."""
        self.failures = 0
        """Changes of the files that were refused (the policy in force stayed)."""

    def wake(self) -> None:
        """Look at the files now (``SIGHUP``)."""
        self._wake.set()

    async def run(self) -> None:
        """Watch until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
            self._wake.clear()
            await self.check()

    async def check(self) -> bool:
        """Read the files again if they changed since last looked at; whether a new policy was
        applied."""
        stamp = await asyncio.to_thread(_stamp, self._paths)
        if stamp == self._seen:
            return False
        self._seen = stamp
        try:
            policy = await asyncio.to_thread(self._read)
            if self._configured and not policy.configured:
                # No rule and no default left would let everyone list and call everything: a
                # file emptied or cut short by accident must not do that to a running gateway.
                raise ValueError(
                    "the catalogue files no longer declare a policy (no rule, no default); "
                    "a gateway without a policy starts that way, it is not reloaded into one"
                )
        except (OSError, ValueError) as exc:
            self.failures += 1
            log.error(
                "the tool policy was not reloaded; the policy in force stays: %s",
                exc,
                extra={"files": [str(path) for path in self._paths]},
            )
            return False
        self._apply(policy)
        self.reloads += 1
        log.info(
            "tool policy reloaded",
            extra={"rules": len(policy.rules), "default": policy.default or "allow"},
        )
        return True

    def _read(self) -> ToolPolicy:
        sections = [*self._fixed]
        for path in self._paths:
            sections.append(load_catalogue(path, self._roles).policy)
        return ToolPolicy.from_sections(sections)


@asynccontextmanager
async def reloading_policy(reloader: PolicyReloader) -> AsyncIterator[None]:
    """Run ``reloader`` while the block runs, woken by ``SIGHUP`` where the loop can take
    signals (the main thread of a Unix process)."""
    loop = asyncio.get_running_loop()
    listening = False
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGHUP, reloader.wake)
        listening = True
    task = asyncio.create_task(reloader.run(), name="policy-reload")
    try:
        yield
    finally:
        if listening:
            loop.remove_signal_handler(signal.SIGHUP)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
