"""A shield from anyio cancellation that costs nothing where nothing could cancel.

``anyio.CancelScope(shield=True)`` stops an enclosing anyio cancel scope (an MCP request's, a
task group's) from cancelling the work inside it; a native ``Task.cancel()`` is not stopped by it
on asyncio. A task that no anyio scope holds (a plain request of uvicorn's) has nothing for it to
stop, yet making and entering one cost about 5 µs, a share of a governed call worth saving.

Whether anyio holds the task is read from anyio's own (private) record of tasks and their
scopes: tests/platform/test_shielding.py fails if a newer anyio keeps it elsewhere. Off an asyncio
event loop, the shield is always made.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import anyio
from anyio._backends._asyncio import _task_states

_NOTHING_TO_SHIELD_FROM: AbstractContextManager[Any] = nullcontext()


def shielded() -> AbstractContextManager[Any]:
    """``anyio.CancelScope(shield=True)`` for the running task, or a context doing nothing when
    no anyio cancel scope holds it (the shield would stop nothing)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not on an asyncio event loop
        task = None
    if task is not None:
        state = _task_states.get(task)
        if state is None or state.cancel_scope is None:
            return _NOTHING_TO_SHIELD_FROM
    return anyio.CancelScope(shield=True)
