"""The tool policy follows its catalogue files while the gateway runs: :class:`PolicyReloader`.

The files of ``GATEWAY_TOOL_CATALOGUES`` are looked at every ``GATEWAY_POLICY_RELOAD_SECONDS``
(and at once on ``SIGHUP``); when one changed, all are read again and their ``policy:`` sections
become the policy every later listing and call is judged by. Every replica does the same with its
copy of the files, so a deployment changes who may do what by changing one file, without a
restart.

A file being written is not read: a change is read once the files have looked the same for
:data:`SETTLE_SECONDS` (a prefix of a YAML catalogue is often a valid catalogue that allows more
than the finished file), and what was read is applied only if the files did not change while
they were read. ``SIGHUP`` says the files are ready: they are read at once. A change that does not
read (invalid, a role nobody declared, a file missing) changes nothing: the policy in force stays,
and the refusal is logged once per change of the files. So does a change that leaves no policy at
all (no rule, no default) where one was in force: that would let everyone list and call
everything. Only the policy follows: tools and upstream servers are still read at start.
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


SETTLE_SECONDS = 1.0
"""How long changed files must stay unchanged before they are read (a writer may be halfway)."""
MIN_INTERVAL_SECONDS = 0.1
"""The shortest interval between looks (a smaller setting counts as this)."""


class PolicyReloader:
    """Reads the policy of ``paths`` (after the ``fixed`` catalogues' sections, as at start)
    again whenever the files change, and hands each new policy to ``apply``. With ``interval``
    0 the files are looked at on ``SIGHUP`` only."""

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
        self._interval = max(interval, MIN_INTERVAL_SECONDS) if interval > 0 else None
        self._seen = _stamp(self._paths)
        self._changed_at: float | None = None
        """When the files last looked different (loop time): a change not yet read."""
        self._wake = asyncio.Event()
        self._forced = False
        self.reloads = 0
        """Policies applied since start."""
        self.failures = 0
        """Changes of the files that were refused (the policy in force stayed)."""

    def wake(self) -> None:
        """Read the files now if they changed, without waiting for them to settle
        (``SIGHUP``: whoever sends it says the files are ready)."""
        self._forced = True
        self._wake.set()

    async def run(self) -> None:
        """Watch until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._next_look()):
                    await self._wake.wait()
            self._wake.clear()
            forced, self._forced = self._forced, False
            try:
                await self.check(forced=forced)
            except Exception:  # never the end of reloading (a file that exhausts memory, ...)
                self.failures += 1
                log.exception("the tool policy was not reloaded; the policy in force stays")

    def _next_look(self) -> float | None:
        if self._changed_at is not None:  # a change waits to settle: look again soon
            return min(self._interval or SETTLE_SECONDS, SETTLE_SECONDS)
        return self._interval

    async def check(self, *, forced: bool = False) -> bool:
        """Read the files again if they changed and have settled (at once when ``forced``);
        whether a new policy was applied."""
        loop = asyncio.get_running_loop()
        stamp = await asyncio.to_thread(_stamp, self._paths)
        if stamp != self._seen:
            self._seen, self._changed_at = stamp, loop.time()
            if not forced:
                return False
        if self._changed_at is None:
            return False
        if not forced and loop.time() - self._changed_at < SETTLE_SECONDS:
            return False
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
            self._changed_at = None  # looked at again when the files change again
            self.failures += 1
            log.error(
                "the tool policy was not reloaded; the policy in force stays: %s",
                exc,
                extra={"files": [str(path) for path in self._paths]},
            )
            return False
        after = await asyncio.to_thread(_stamp, self._paths)
        if after != stamp:  # written to while it was read: read again once it settles
            self._seen, self._changed_at = after, loop.time()
            return False
        self._changed_at = None
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
async def reloading_policy(reloader: PolicyReloader | None) -> AsyncIterator[None]:
    """Run ``reloader`` while the block runs, woken by ``SIGHUP`` where the loop can take
    signals (the main thread of a Unix process). Without one (no catalogue files) ``SIGHUP`` is
    still taken, and logged: its default action would stop the gateway."""
    loop = asyncio.get_running_loop()
    listening = False
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGHUP, reloader.wake if reloader else _nothing_to_reload)
        listening = True
    task = asyncio.create_task(reloader.run(), name="policy-reload") if reloader else None
    try:
        yield
    finally:
        if listening:
            loop.remove_signal_handler(signal.SIGHUP)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _nothing_to_reload() -> None:
    log.info("SIGHUP: no catalogue files (GATEWAY_TOOL_CATALOGUES) to reload a policy from")
