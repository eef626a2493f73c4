"""The tiny app ``bench.tlog_proofs`` serves its log with: the platform's tlog router on a bare
FastAPI app, mounted as the services mount it (``app.state.tlogs`` and ``tlog_router``), and a
trivial ``/ping`` as the same-app baseline.

Every answer carries ``Server-Timing: app;dur=<ms>``: the time from the request reaching the app
to its response starting (the route, its statements and the JSON rendering), so the bench reads
the server's time apart from the client's and the loopback's.

Settings come from the environment: ``BENCH_TLOG_DATABASE_URL`` (SQLAlchemy URL),
``BENCH_TLOG_NAME`` and ``BENCH_TLOG_SIGNER_KEY`` (the log's ``PRIVATE+KEY+…`` text).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from conclave.platform.db.engine import create_engine
from conclave.platform.tlog import LogKeys, TransparencyLog
from conclave.platform.tlog.api import tlog_router
from conclave.platform.tlog.published import PublishedLogs
from conclave.platform.transparency import NoteSigner


class ServerTiming:
    """Add ``Server-Timing: app;dur=<ms>`` to every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                took = (time.perf_counter() - started) * 1000
                headers = [*message.get("headers", []), (b"server-timing", b"app;dur=%.4f" % took)]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, timed)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    engine = create_engine(os.environ["BENCH_TLOG_DATABASE_URL"])
    signer = NoteSigner.from_skey(os.environ["BENCH_TLOG_SIGNER_KEY"])
    log = await TransparencyLog.open(
        engine, os.environ["BENCH_TLOG_NAME"], LogKeys(signer.name, (signer,))
    )
    app.state.tlogs = PublishedLogs([log])
    try:
        yield
    finally:
        await engine.dispose()


app = FastAPI(lifespan=lifespan)
app.include_router(tlog_router)
app.add_middleware(ServerTiming)


@app.get("/ping")
async def ping() -> dict[str, bool]:
    """The baseline: the same app and middleware, no statement."""
    return {"ok": True}
