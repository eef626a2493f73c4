"""The background sync's schedule, with an injected clock: every period, only when healthy."""

from __future__ import annotations

import httpx

from conclave.edge_client import Outbox, SyncDaemon, SyncReport
from tests.conftest import Backend
from tests.edge_client.conftest import edge_server, envelopes, in_process_client, media_files


class SwitchableHealth(httpx.AsyncBaseTransport):
    """The real app, except that ``/health`` answers 503 while ``down`` is set."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.down = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.down and request.url.path == "/health":
            return httpx.Response(503, json={"status": "unhealthy"})
        return await self.inner.handle_async_request(request)


async def test_daemon_syncs_every_period_only_when_the_server_is_healthy(
    sqlite_engine, memory_bus, tmp_path
) -> None:
    backend = Backend("embedded", sqlite_engine, memory_bus)
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    files = iter(media_files(tmp_path / "media", 5))
    now = [0.0]
    sleeps: list[float] = []
    runs: list[tuple[float, SyncReport | None]] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    async with edge_server(backend, tmp_path / "server") as app:
        health = SwitchableHealth(httpx.ASGITransport(app=app))

        def on_run(report: SyncReport | None) -> None:
            runs.append((now[0], report))
            now[0] += 30  # the run itself took 30 s
            if len(runs) == 3:
                now[0] += 1000  # an overrun: the next run starts at once
            health.down = len(runs) == 1  # down for the second run only
            outbox.enqueue(envelopes([next(files)])[0])

        outbox.enqueue(envelopes([next(files)])[0])
        async with in_process_client(app, transport=health) as client:
            daemon = SyncDaemon(
                outbox, client, 900, clock=lambda: now[0], sleep=sleep, on_run=on_run
            )
            await daemon.run(max_runs=4)

    assert [at for at, _ in runs] == [0, 900, 1800, 2830]
    assert sleeps == [870, 870]  # the period runs from start to start; no catch-up storm
    assert [len(report.sent) if report else None for _, report in runs] == [1, None, 2, 1]
    outbox.close()
