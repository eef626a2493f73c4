"""``conclave worker collector``: extra expedition workers, no HTTP listener."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer
from rich.console import Console

from conclave.platform.logs import configure_logging
from conclave.platform.runtime import Platform
from conclave.settings import CollectorSettings

console = Console(stderr=True)
worker_app = typer.Typer(help="Run background workers (no HTTP listener).", no_args_is_help=True)


@worker_app.command("collector")
def collector_worker(
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, help="Expeditions run at once (default COLLECTOR_WORKER_CONCURRENCY)."),
    ] = None,
) -> None:
    """Run expeditions from the shared queue, plus the bus listeners, scheduler and indexer."""
    settings = CollectorSettings()
    if concurrency is not None:
        settings = settings.model_copy(update={"worker_concurrency": concurrency})
    configure_logging(settings.log_level, settings.log_format)
    asyncio.run(_run(settings))


async def _run(settings: CollectorSettings) -> None:
    # Imported here, not with the CLI: the collector pulls in Qdrant and numpy, which every other
    # `conclave` command (an edge device's `conclave edge sync` included) would otherwise load.
    from conclave.collector.metrics import CollectorMetrics
    from conclave.collector.wiring import CollectorRuntime

    async with (
        Platform.open(settings) as platform,
        CollectorRuntime.open(settings, platform, CollectorMetrics()) as runtime,
    ):
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        console.print(
            f"collector worker [bold]{runtime.worker.worker_id}[/bold] running "
            f"{settings.worker_concurrency} at a time"
        )
        await stop.wait()
        # Leaving the block stops the worker: interrupted expeditions go back to the queue.
