"""Use cases of the expedition service: submit, inspect, cancel, list, stats, collections."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from conclave.collector import store
from conclave.collector.events import (
    optional_rfc3339,
    queued_event,
    state_event,
)
from conclave.collector.metrics import CollectorMetrics
from conclave.collector.models import (
    PRIORITY_RANK,
    CollectionInfo,
    ExpeditionCreate,
    Progress,
    RecordRead,
    SearchHit,
    SearchResult,
)
from conclave.collector.parameter_secrets import check_parameters
from conclave.collector.registry import ExpeditionRegistry
from conclave.collector.semantic.base import SemanticMemory
from conclave.collector.store import ExpeditionRecord
from conclave.collector.views import record_read
from conclave.platform.auth import Principal
from conclave.platform.clock import as_utc, utc_now
from conclave.platform.consumed_store import mark_consumed
from conclave.platform.db.engine import store_errors
from conclave.platform.errors import Conflict, NotFound, Unavailable, Unprocessable
from conclave.platform.keyset import decode_cursor, page_of
from conclave.platform.outbox import add_event
from conclave.platform.problem_types import ProblemCode
from conclave.platform.runtime import Platform
from conclave.settings import CollectorSettings

# The collection a type writes into when the request names none (see expedition_types.py); the
# other built-in types (audit, healing) then work on every collection.
DEFAULT_COLLECTION = {"discovery": "default", "evidence_ingest": "evidence"}


def written_collections(expedition_type: str, target_collections: list[str]) -> list[str]:
    """The collections an expedition of this type and targets works on, defaults included."""
    if target_collections:
        return list(target_collections)
    default = DEFAULT_COLLECTION.get(expedition_type)
    return [default] if default else []


def sees(principal: Principal | None, owner: str | None) -> bool:
    """Whether ``principal`` may see and act on what ``owner`` requested (``None``: an internal
    caller, the worker or the scheduler, that sees everything)."""
    return principal is None or principal.is_operator or owner == principal.user_id


def owner_filter(principal: Principal | None) -> str | None:
    """Whose rows ``principal`` lists: ``None`` for everyone's (an operator or an internal
    caller), else the principal's own."""
    return None if principal is None or principal.is_operator else principal.user_id


def _not_yours(collection: str) -> dict[str, str]:
    return {
        "field": "target_collections",
        "message": f"{collection!r} is not yours",
        "type": "collection_owned",
    }


class ExpeditionService:
    """What the HTTP routes, the bus listeners and the scheduler ask of the collector."""

    def __init__(
        self,
        settings: CollectorSettings,
        platform: Platform,
        registry: ExpeditionRegistry,
        memory: SemanticMemory,
        metrics: CollectorMetrics,
        on_submitted: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.platform = platform
        self.registry = registry
        self.memory = memory
        self.metrics = metrics
        self._on_submitted = on_submitted
        self._started = time.monotonic()

    def notify_submitted(self) -> None:
        """After a commit that queued expeditions: wake this process's worker, and the outbox
        relay so the ``queued`` wake-up reaches the workers of other processes at once."""
        self.platform.relay.wake()
        self._on_submitted()

    @staticmethod
    async def queue(connection: AsyncConnection, row: ExpeditionRecord) -> None:
        """Insert a row made by :meth:`new_row` and its wake-up event in the caller's
        transaction (call :meth:`notify_submitted` after the commit)."""
        await store.insert_expedition(connection, row)
        await add_event(connection, queued_event(row))

    def new_row(
        self,
        request: ExpeditionCreate,
        *,
        requested_by: str | None,
        expedition_id: str | None = None,
        correlation_id: str | None = None,
        from_user: bool = False,
    ) -> ExpeditionRecord:
        """Validate ``request`` (422) and build its queued row. A request ``from_user`` (over
        HTTP, not from the bus or a stored schedule) may not hold a literal credential."""
        self.registry.validate(request, self.settings)
        if from_user:
            check_parameters(request.parameters, self.settings.source_secrets)
        limit = self.settings.expedition_timeout_seconds
        now = utc_now()
        return ExpeditionRecord(
            expedition_id=expedition_id or str(uuid.uuid4()),
            expedition_type=request.expedition_type,
            status="queued",
            priority=request.priority,
            priority_rank=PRIORITY_RANK[request.priority],
            target_collections=request.collections(),
            parameters=request.parameters,
            correlation_id=request.correlation_id or correlation_id or None,
            requested_by=requested_by,
            timeout_seconds=min(request.timeout_seconds or limit, limit),
            progress=Progress().model_dump(),
            agents_deployed=[],
            results=None,
            errors=[],
            attempts=0,
            worker_id=None,
            lease_expires_at=None,
            created_at=now,
            started_at=None,
            completed_at=None,
            updated_at=now,
        )

    async def submit(
        self,
        request: ExpeditionCreate,
        *,
        requested_by: str | None,
        correlation_id: str | None = None,
        expedition_id: str | None = None,
        dedupe: tuple[str, str] | None = None,
        principal: Principal | None = None,
    ) -> ExpeditionRecord:
        """Queue an expedition; with ``dedupe=(consumer group, event id)`` a redelivered event
        returns the expedition it created the first time instead of queueing another. With
        ``principal`` (a user's request) the collections it works on must be theirs."""
        if principal is not None:
            request = await self._with_own_targets(request, principal)
        row = self.new_row(
            request,
            requested_by=requested_by,
            expedition_id=expedition_id,
            correlation_id=correlation_id,
            from_user=principal is not None,
        )
        try:
            with store_errors():
                async with self.platform.engine.begin() as connection:
                    if dedupe is not None and not await mark_consumed(
                        connection, *dedupe, at=row.created_at
                    ):
                        # A redelivered event: the expedition committed with its mark.
                        existing = await store.get_expedition(connection, row.expedition_id)
                        if existing is None:
                            raise LookupError(f"event {dedupe[1]} is consumed, its expedition gone")
                        return existing
                    await self.reserve_collections(
                        connection,
                        written_collections(row.expedition_type, row.target_collections),
                        row.requested_by,
                        principal,
                    )
                    await self.queue(connection, row)
        except IntegrityError:
            existing = await store.get_expedition(self.platform.engine, row.expedition_id)
            if dedupe is None or existing is None:
                raise
            return existing
        self.metrics.expeditions.labels(request.expedition_type, "queued").inc()
        self.notify_submitted()
        # Answer with the row as it was committed (queued): a worker of any process, woken by the
        # outbox event committed with it, may already have claimed it by the time we could re-read.
        return row

    async def reserve_collections(
        self,
        connection: AsyncConnection,
        names: list[str],
        owner: str | None,
        principal: Principal | None,
    ) -> None:
        """Claim for ``owner`` the collections of ``names`` nobody owns yet; for a user who is
        not an operator, every one of them must then be theirs (409 ``COLLECTION_OWNED``). A
        shared collection is claimed only by an operator or an internal caller (the bridge): a
        user who named it first must not become the writer of what everyone reads."""
        if owner is None or not names:
            return
        user = principal is not None and not principal.is_operator
        shared = set(self.settings.shared_collections) if user else set()
        claimable = [name for name in names if name not in shared]
        await store.claim_collections(connection, claimable, owner, utc_now())
        if not user:
            return
        owners = await store.owners_of(connection, names)
        taken = [name for name in names if owners.get(name) != owner]
        if taken:
            raise Conflict(
                f"Collection {taken[0]!r} belongs to another user; choose another name.",
                code=ProblemCode.COLLECTION_OWNED,
                errors=[_not_yours(name) for name in taken],
            )

    async def _with_own_targets(
        self, request: ExpeditionCreate, principal: Principal
    ) -> ExpeditionCreate:
        """A user's request that names no collection for a type that then works on every
        collection (audit, healing, plug-ins) works on the user's own collections instead."""
        if (
            principal.is_operator
            or request.target_collections
            or request.expedition_type in DEFAULT_COLLECTION
        ):
            return request
        with store_errors():
            owned = await store.owned_by(self.platform.engine, principal.user_id)
        if not owned:
            raise Unprocessable(
                "You own no collection yet: name target_collections.",
                code=ProblemCode.NO_COLLECTIONS,
            )
        return request.model_copy(update={"target_collections": owned})

    async def get(self, expedition_id: str, principal: Principal | None = None) -> ExpeditionRecord:
        """One expedition (404 when unknown, or when it is another user's: ids cannot be
        probed)."""
        with store_errors():
            row = await store.get_expedition(self.platform.engine, expedition_id)
        if row is None or not sees(principal, row.requested_by):
            raise NotFound(
                f"No expedition {expedition_id!r}.", code=ProblemCode.EXPEDITION_NOT_FOUND
            )
        return row

    async def wait(
        self, expedition_id: str, seconds: float, principal: Principal | None = None
    ) -> ExpeditionRecord:
        """The expedition once it is terminal, or as it is when ``seconds`` have passed."""
        deadline = time.monotonic() + seconds
        while True:
            row = await self.get(expedition_id, principal)
            if row.status in store.TERMINAL or time.monotonic() >= deadline:
                return row
            await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    async def cancel(
        self, expedition_id: str, principal: Principal | None = None
    ) -> ExpeditionRecord:
        """Cancel a queued or running expedition (409 once it has finished; 404 when it is
        another user's)."""
        await self.get(expedition_id, principal)  # whose it is never changes
        now = utc_now()
        with store_errors():
            async with self.platform.engine.begin() as connection:
                row = await store.finish(
                    connection,
                    expedition_id,
                    {"status": "cancelled", "completed_at": now, "updated_at": now},
                )
                if row is not None:
                    await add_event(connection, state_event(row, "cancelled"))
        if row is None:
            current = await self.get(expedition_id)
            raise Conflict(
                f"Expedition {expedition_id} is already {current.status}.",
                code=ProblemCode.EXPEDITION_FINISHED,
                extra={"expedition_status": current.status},
            )
        self.platform.relay.wake()
        self.metrics.expeditions.labels(row.expedition_type, "cancelled").inc()
        return row

    async def history(
        self,
        *,
        status: str | None,
        expedition_type: str | None,
        since: datetime | None,
        until: datetime | None,
        cursor: str | None,
        limit: int,
        principal: Principal | None = None,
    ) -> tuple[list[ExpeditionRecord], str | None]:
        """A page of expeditions, newest first, and the cursor of the next page (only the
        principal's own unless they are an operator)."""
        after = decode_cursor(cursor) if cursor else None
        with store_errors():
            rows = await store.history(
                self.platform.engine,
                status=status,
                expedition_type=expedition_type,
                since=as_utc(since) if since else None,
                until=as_utc(until) if until else None,
                after=after,
                limit=limit + 1,  # one more: whether a next page exists is known, not guessed
                requested_by=owner_filter(principal),
            )
        return page_of(rows, limit, lambda row: (row.created_at, row.expedition_id))

    async def stats(self, principal: Principal | None = None) -> dict[str, Any]:
        """Counts by status and type, success rate, duration percentiles, queue, records: a
        user's of their own expeditions and the records they may read (the queue's depth is
        the deployment's: how long a new expedition waits)."""
        engine = self.platform.engine
        mine = owner_filter(principal)
        readable = await self.readable(principal)
        with store_errors():
            counts = await store.counts_by_status_and_type(engine, mine)
            durations = await store.recent_durations(engine, requested_by=mine)
            depth = await store.queue_depth(engine)
            total_records = await store.total_records(engine, mine, sorted(readable or ()))
        by_status: dict[str, int] = dict.fromkeys(
            ("queued", "running", "completed", "failed", "cancelled"), 0
        )
        by_type: dict[str, dict[str, int]] = {}
        for status, kind, count in counts:
            by_status[status] = by_status.get(status, 0) + count
            by_type.setdefault(kind, {})[status] = count
        finished = by_status["completed"] + by_status["failed"]
        return {
            "expeditions": {"total": sum(by_status.values()), "by_status": by_status},
            "by_type": by_type,
            "success_rate": round(by_status["completed"] / finished, 4) if finished else None,
            "duration_seconds": _percentiles(durations),
            "queue_depth": depth,
            "active": by_status["running"],
            "records_collected": total_records,
            "uptime_seconds": round(time.monotonic() - self._started, 3),
            "expedition_types": sorted(self.registry.types),
        }

    async def readable(self, principal: Principal | None) -> set[str] | None:
        """The collections ``principal`` may read, or ``None`` for all of them: an operator's
        (or an internal caller's) are all; a user's are theirs and the shared ones."""
        owner = owner_filter(principal)
        if owner is None:
            return None
        with store_errors():
            owned = await store.owned_by(self.platform.engine, owner)
        return {*owned, *self.settings.shared_collections}

    async def _check_readable(
        self, collection: str, principal: Principal | None, missing: NotFound
    ) -> None:
        readable = await self.readable(principal)
        if readable is not None and collection not in readable:
            raise missing  # as if it did not exist: names cannot be probed either

    async def collections(self, principal: Principal | None = None) -> list[CollectionInfo]:
        """Collections with their size in both stores (those ``principal`` may read)."""
        readable = await self.readable(principal)
        reader = owner_filter(principal)
        with store_errors():
            rows = await store.collection_counts(self.platform.engine, reader)
        result = []
        for row in rows:
            if readable is not None and row.collection not in readable:
                continue
            try:
                vectors: int | None = await self.memory.count(row.collection, reader)
            except Exception:  # semantic memory down: the structured figures still answer
                vectors = None
            result.append(
                CollectionInfo(
                    name=row.collection,
                    records=row.records,
                    vectors=vectors,
                    pending_vectors=row.pending,
                    updated_at=optional_rfc3339(row.updated_at),
                )
            )
        return result

    async def record(
        self, collection: str, key: str, principal: Principal | None = None
    ) -> RecordRead:
        """One record (404 when unknown, in a collection the principal may not read, or
        another user's in a collection they may: see :attr:`CollectedRecord.owner`)."""
        missing = NotFound(
            f"No record {key!r} in {collection!r}.", code=ProblemCode.RECORD_NOT_FOUND
        )
        await self._check_readable(collection, principal, missing)
        with store_errors():
            row = await store.get_record(
                self.platform.engine, collection, key, owner_filter(principal)
            )
        if row is None:
            raise missing
        return record_read(row)

    async def search(
        self, collection: str, query: str, limit: int, principal: Principal | None = None
    ) -> SearchResult:
        """Semantic search; hits are read back from the structured store (the truth). 404 for
        a collection the principal may not read; a user finds the records they may read only."""
        missing = NotFound(f"No collection {collection!r}.", code=ProblemCode.COLLECTION_NOT_FOUND)
        await self._check_readable(collection, principal, missing)
        reader = owner_filter(principal)
        try:
            found = await self.memory.search(collection, query, limit, reader)
        except Exception as exc:
            raise Unavailable(
                "Semantic memory is not reachable.", code=ProblemCode.SEMANTIC_MEMORY_UNAVAILABLE
            ) from exc
        with store_errors():
            # The structured store decides too: a point written before its record changed hands
            # still carries the owner it had.
            rows = await store.get_records(
                self.platform.engine, collection, [key for key, _ in found], reader
            )
        by_key = {row.record_key: row for row in rows}
        hits = [
            SearchHit(score=round(score, 6), record=record_read(by_key[key]))
            for key, score in found
            if key in by_key  # an orphan point (record deleted) is not a result
        ]
        return SearchResult(
            collection=collection,
            query=query,
            embedder=self.memory.embedder_name,
            hits=hits,
            count=len(hits),
        )


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"count": 0, "p50": None, "p90": None, "p99": None, "mean": None}
    ordered = sorted(values)
    if len(ordered) == 1:
        p50 = p90 = p99 = ordered[0]
    else:
        cuts = statistics.quantiles(ordered, n=100, method="inclusive")
        p50, p90, p99 = cuts[49], cuts[89], cuts[98]
    return {
        "count": len(ordered),
        "p50": round(p50, 4),
        "p90": round(p90, 4),
        "p99": round(p99, 4),
        "mean": round(statistics.fmean(ordered), 4),
    }
