"""The expedition worker: claims queued expeditions from the store and runs them.

The relational table is the queue, shared by every collector process: a claim takes the best
queued row in one statement (``SKIP LOCKED`` on PostgreSQL), a lease renewed by a heartbeat keeps
it, and any worker requeues expeditions whose lease expired (their worker died, even by kill -9).
The heartbeat also notices a cancellation (the row left ``running``) and stops the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import uuid
from datetime import timedelta
from typing import Any

from conclave.collector import store
from conclave.collector.agents.context import ExpeditionContext, ExpeditionFailed, ProgressTracker
from conclave.collector.agents.leader import ExpeditionLeader
from conclave.collector.events import duration_ms, state_event
from conclave.collector.indexer import VectorIndexer
from conclave.collector.metrics import CollectorMetrics
from conclave.collector.registry import ExpeditionRegistry
from conclave.collector.semantic.base import SemanticMemory
from conclave.collector.store import ExpeditionRecord
from conclave.platform.clock import rfc3339, utc_now
from conclave.platform.db.engine import is_store_down
from conclave.platform.logs import correlation_id_var
from conclave.platform.outbox import add_event
from conclave.platform.problem_types import ProblemCode
from conclave.platform.runtime import Platform
from conclave.settings import CollectorSettings

log = logging.getLogger(__name__)


def _claim_key(row: ExpeditionRecord) -> str:
    # One expedition may be claimed again by the same worker after its lease lapsed: each claim
    # (expedition, attempt) is tracked on its own.
    return f"{row.expedition_id}#{row.attempts}"


def _error(code: str, message: str, attempt: int) -> dict[str, Any]:
    return {"code": code, "message": message, "attempt": attempt, "at": rfc3339(utc_now())}


class ExpeditionWorker:
    """Runs up to ``worker_concurrency`` expeditions at a time in this process."""

    def __init__(
        self,
        settings: CollectorSettings,
        platform: Platform,
        registry: ExpeditionRegistry,
        memory: SemanticMemory,
        indexer: VectorIndexer,
        metrics: CollectorMetrics,
        *,
        worker_id: str | None = None,
    ) -> None:
        self.settings = settings
        self.platform = platform
        self.registry = registry
        self.memory = memory
        self.indexer = indexer
        self.metrics = metrics
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._lease = timedelta(seconds=settings.lease_seconds)
        self._heartbeat_seconds = min(settings.lease_seconds / 3, 2.0)
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._lost: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def wake(self) -> None:
        """Look for queued expeditions now (called after a submission in this process)."""
        self._wake.set()

    async def start(self) -> None:
        """Start claiming."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="collector-worker")

    async def stop(self) -> None:
        """Stop claiming; interrupted runs go back to the queue for another worker."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        runs = list(self._runs.values())
        for run in runs:
            run.cancel()
        await asyncio.gather(*runs, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.requeue_expired()
                while len(self._runs) < self.settings.worker_concurrency:
                    row = await self._claim()
                    if row is None:
                        break
                    task = asyncio.create_task(
                        self._run(row), name=f"expedition-{row.expedition_id}"
                    )
                    self._runs[_claim_key(row)] = task
                    task.add_done_callback(functools.partial(self._done, _claim_key(row)))
                self.metrics.queue_depth.set(await store.queue_depth(self.platform.engine))
            except Exception as exc:
                log.log(
                    logging.WARNING if is_store_down(exc) else logging.ERROR,
                    "expedition worker pass failed",
                    exc_info=not is_store_down(exc),
                )
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation that
            # arrives as the event is set, and stop() then waits for a loop that goes on.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.poll_seconds):
                    await self._wake.wait()

    def _done(self, key: str, _task: asyncio.Task[None]) -> None:
        self._runs.pop(key, None)
        self._lost.discard(key)
        self._wake.set()  # a slot is free

    async def _claim(self) -> ExpeditionRecord | None:
        now = utc_now()
        async with self.platform.engine.begin() as connection:
            row = await store.claim_next(connection, self.worker_id, now, now + self._lease)
            if row is not None:
                await add_event(connection, state_event(row, "started"))
        if row is not None:
            self.platform.relay.wake()
            self.metrics.expeditions.labels(row.expedition_type, "running").inc()
        return row

    async def requeue_expired(self) -> int:
        """Requeue (or fail, after ``max_attempts``) expeditions whose worker stopped renewing."""
        now = utc_now()
        if not await store.expired_lease_count(self.platform.engine, now):
            return 0
        finished = []
        async with self.platform.engine.begin() as connection:
            rows = await store.expired_leases(connection, now)
            for row in rows:
                lost = _error(
                    "WORKER_LOST",
                    f"worker {row.worker_id} stopped renewing its lease",
                    row.attempts,
                )
                if row.attempts < self.settings.max_attempts:
                    await store.requeue(
                        connection, row.expedition_id, now, errors=[*row.errors, lost]
                    )
                    continue
                gave_up = _error(
                    "TOO_MANY_ATTEMPTS",
                    f"gave up after {row.attempts} attempts",
                    row.attempts,
                )
                done = await store.finish(
                    connection,
                    row.expedition_id,
                    {
                        "status": "failed",
                        "errors": [*row.errors, lost, gave_up],
                        "completed_at": now,
                        "updated_at": now,
                    },
                )
                if done is not None:
                    await add_event(connection, state_event(done, "failed"))
                    finished.append(done)
        for done in finished:
            self.metrics.expeditions.labels(done.expedition_type, "failed").inc()
        self.platform.relay.wake()
        if rows:
            self._wake.set()
        return len(rows)

    def _context(self, row: ExpeditionRecord, progress: ProgressTracker) -> ExpeditionContext:
        return ExpeditionContext(
            expedition_id=row.expedition_id,
            expedition_type=row.expedition_type,
            target_collections=list(row.target_collections),
            parameters=dict(row.parameters),
            correlation_id=row.correlation_id,
            engine=self.platform.engine,
            memory=self.memory,
            indexer=self.indexer,
            sources=dict(self.registry.sources),
            settings=self.settings,
            metrics=self.metrics,
            progress=progress,
            requested_by=row.requested_by,
        )

    async def _run(self, row: ExpeditionRecord) -> None:
        # Each run is a task of its own: everything it logs carries the expedition's correlation.
        correlation_id_var.set(row.correlation_id)
        progress = ProgressTracker()
        run_task = asyncio.current_task()
        assert run_task is not None
        heartbeat = asyncio.create_task(self._heartbeat(row, progress, run_task))
        self.metrics.active.inc()
        results: dict[str, Any] | None = None
        error: dict[str, Any] | None = None
        try:
            kind = self.registry.types.get(row.expedition_type)
            if kind is None:
                raise ExpeditionFailed(f"expedition type {row.expedition_type!r} is not registered")
            leader = ExpeditionLeader(self._context(row, progress), kind)
            results = await leader.run(row.timeout_seconds)
        except ExpeditionFailed as exc:
            error = _error(exc.code, str(exc), row.attempts)
        except asyncio.CancelledError:
            if _claim_key(row) in self._lost:
                return  # cancelled by a user or taken over: the row is not ours to write
            if self._stopping:
                await asyncio.shield(self._release(row))
            raise
        except Exception as exc:
            log.exception("expedition crashed", extra={"expedition_id": row.expedition_id})
            error = _error(
                ProblemCode.INTERNAL_ERROR, f"internal error ({type(exc).__name__})", row.attempts
            )
        finally:
            heartbeat.cancel()
            self.metrics.active.dec()
        await self._finish(row, progress, results, error)

    async def _release(self, row: ExpeditionRecord) -> None:
        with contextlib.suppress(Exception):
            async with self.platform.engine.begin() as connection:
                await store.requeue(
                    connection, row.expedition_id, utc_now(), claim=(self.worker_id, row.attempts)
                )

    async def _heartbeat(
        self, row: ExpeditionRecord, progress: ProgressTracker, run_task: asyncio.Task[Any]
    ) -> None:
        expedition_id = row.expedition_id
        while True:
            await asyncio.sleep(self._heartbeat_seconds)
            now = utc_now()
            try:
                ours = await store.renew_lease(
                    self.platform.engine,
                    expedition_id,
                    self.worker_id,
                    now + self._lease,
                    progress.snapshot(),
                    list(progress.agents),
                    now,
                    row.attempts,
                )
            except Exception as exc:  # store down: keep running; the lease may lapse meanwhile
                log.warning("lease renewal failed: %s", type(exc).__name__)
                continue
            if not ours:
                self._lost.add(_claim_key(row))
                run_task.cancel()
                return

    async def _finish(
        self,
        row: ExpeditionRecord,
        progress: ProgressTracker,
        results: dict[str, Any] | None,
        error: dict[str, Any] | None,
    ) -> None:
        status = "completed" if error is None else "failed"
        for attempt in range(5):
            now = utc_now()
            values = {
                "status": status,
                "results": results,
                "errors": [*row.errors, error] if error else list(row.errors),
                "progress": progress.snapshot(finished=error is None),
                "agents_deployed": list(progress.agents),
                "completed_at": now,
                "updated_at": now,
            }
            try:
                async with self.platform.engine.begin() as connection:
                    done = await store.finish(
                        connection,
                        row.expedition_id,
                        values,
                        claim=(self.worker_id, row.attempts),
                    )
                    if done is not None:
                        await add_event(connection, state_event(done, status))
                break
            except Exception as exc:
                # Store down: retry briefly; past that the lease lapses and another worker
                # re-runs the expedition (binding is idempotent, so that is safe).
                log.warning("recording the outcome failed: %s", type(exc).__name__)
                await asyncio.sleep(0.5 * 2**attempt)
        else:
            return
        if done is None:
            return
        self.platform.relay.wake()
        self.metrics.expeditions.labels(row.expedition_type, status).inc()
        elapsed = duration_ms(done)
        if elapsed is not None:
            self.metrics.duration.labels(row.expedition_type).observe(elapsed / 1000)
        log.info(
            "expedition %s",
            status,
            extra={
                "expedition_id": row.expedition_id,
                "expedition_type": row.expedition_type,
                "duration_ms": elapsed,
            },
        )
