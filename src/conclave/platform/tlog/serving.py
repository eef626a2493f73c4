"""A service's transparency log, from its settings to its routes: opened, integrated in the
background and published (``app.state.tlogs``, read by :data:`conclave.platform.tlog.api.
tlog_router`), the same way in every service that keeps one."""

from __future__ import annotations

from contextlib import AsyncExitStack

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.tlog.integrator import LogIntegrator
from conclave.platform.tlog.keys import log_keys
from conclave.platform.tlog.log import TransparencyLog
from conclave.platform.tlog.published import LeafReaders, PublishedLogs
from conclave.settings import CommonSettings


async def open_log(engine: AsyncEngine, settings: CommonSettings, name: str) -> TransparencyLog:
    """The log ``name`` with its keys and checkpoint interval from ``settings`` (created if
    new; a key generated on first start in embedded mode, see :mod:`.keys`)."""
    return await TransparencyLog.open(
        engine,
        name,
        log_keys(settings, name),
        checkpoint_interval=settings.tlog_checkpoint_interval_seconds,
    )


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
