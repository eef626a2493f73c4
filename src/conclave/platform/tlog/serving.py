"""A service's transparency log, from its settings to its routes: opened, integrated in the
background and published (``app.state.tlogs``, read by :data:`conclave.platform.tlog.api.
tlog_router`), the same way in every service that keeps one."""

from __future__ import annotations

from contextlib import AsyncExitStack

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.tlog.integrator import LogIntegrator
from conclave.platform.tlog.log import TransparencyLog, open_log
from conclave.platform.tlog.published import LeafReaders, PublishedLogs
from conclave.settings import CommonSettings


async def serve_log(
    app: FastAPI,
    stack: AsyncExitStack,
    engine: AsyncEngine,
    settings: CommonSettings,
    name: str,
    leaf_reader: LeafReaders,
) -> TransparencyLog:
    """Open the log ``name``, start its integrator until ``stack`` closes (in every replica: one
    integrates at a time, the others find its lock taken) and publish it with its leaf policy."""
    log = await open_log(engine, settings, name)
    integrator = LogIntegrator([log], poll_seconds=settings.tlog_poll_seconds)
    await integrator.start()
    stack.push_async_callback(integrator.stop)
    app.state.tlogs = PublishedLogs([log], {name: leaf_reader})
    return log
