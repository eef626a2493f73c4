"""Stopping a background loop of the platform without cutting a database transaction in half."""

from __future__ import annotations

import asyncio
import contextlib


async def finish_or_cancel(task: asyncio.Task[None], grace_seconds: float = 5.0) -> None:
    """Wait up to ``grace_seconds`` for ``task`` (told to stop by its owner) to finish its
    pass, then cancel it. Cancelling a task inside a database transaction can leave the driver
    (aiosqlite's thread) waiting forever, so a loop is asked to finish first."""
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout=grace_seconds)
    except TimeoutError:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
