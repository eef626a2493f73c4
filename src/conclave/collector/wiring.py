"""The collector's moving parts in one process, for the HTTP app and ``conclave worker``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from conclave.collector.indexer import VectorIndexer
from conclave.collector.listeners import ExpeditionListeners
from conclave.collector.metrics import CollectorMetrics
from conclave.collector.registry import ExpeditionRegistry
from conclave.collector.scheduler import Scheduler
from conclave.collector.semantic.base import SemanticMemory
from conclave.collector.semantic.opening import open_semantic_memory
from conclave.collector.service import ExpeditionService
from conclave.collector.worker import ExpeditionWorker
from conclave.platform.runtime import Platform
from conclave.settings import CollectorSettings


@dataclass
class CollectorRuntime:
    """Service, worker, indexer, listeners and scheduler sharing one platform."""

    service: ExpeditionService
    worker: ExpeditionWorker
    indexer: VectorIndexer
    memory: SemanticMemory

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        settings: CollectorSettings,
        platform: Platform,
        metrics: CollectorMetrics,
        *,
        run_workers: bool = True,
        worker_id: str | None = None,
        registry: ExpeditionRegistry | None = None,
    ) -> AsyncIterator[CollectorRuntime]:
        """Start the background parts; ``run_workers=False`` leaves running expeditions to other
        processes (the HTTP process then only accepts and reports). ``registry`` defaults to the
        built-ins and the installed plug-ins (:meth:`ExpeditionRegistry.load`)."""
        # The `file` source's only default root, made where operators will look for it; writable
        # by the service's user only, as whoever writes here chooses what callers can read.
        settings.resolved_file_inbox().mkdir(mode=0o750, parents=True, exist_ok=True)
        if registry is None:
            registry = ExpeditionRegistry.load(settings)
        async with AsyncExitStack() as stack:
            memory = open_semantic_memory(settings)
            await memory.open()
            stack.push_async_callback(memory.close)
            indexer = VectorIndexer(platform.engine, memory, metrics)
            worker = ExpeditionWorker(
                settings, platform, registry, memory, indexer, metrics, worker_id=worker_id
            )
            service = ExpeditionService(settings, platform, registry, memory, metrics, worker.wake)
            await indexer.start()
            stack.push_async_callback(indexer.stop)
            if run_workers:
                await worker.start()
                stack.push_async_callback(worker.stop)
                listeners = ExpeditionListeners(
                    service, settings.bridge_channels, consumer=worker.worker_id, wake=worker.wake
                )
                await listeners.start()
                stack.push_async_callback(listeners.stop)
                scheduler = Scheduler(service, settings.scheduler_poll_seconds)
                await scheduler.start()
                stack.push_async_callback(scheduler.stop)
            yield cls(service=service, worker=worker, indexer=indexer, memory=memory)
