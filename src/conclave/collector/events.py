"""The expedition service's bus channels and the payload of its state events."""

from __future__ import annotations

from datetime import datetime

from conclave.collector.store import ExpeditionRecord
from conclave.platform.bus.base import Event
from conclave.platform.clock import as_utc, rfc3339

REQUESTED = "collector.expedition.run.requested"
# A wake-up for idle workers of other processes: "the queue has new work". Not a state change
# (the row in the store is the truth), so consumers need no dedupe: an extra wake-up costs one
# claim attempt, a lost one costs at most one poll interval.
QUEUED = "collector.expedition.run.queued"
STATES = ("started", "completed", "failed", "cancelled")
SOURCE = "collector"


def state_channel(state: str) -> str:
    """``collector.expedition.run.<state>``."""
    return f"collector.expedition.run.{state}"


def optional_rfc3339(value: datetime | None) -> str | None:
    """A moment as the API and the events write it, ``None`` for one that has not come."""
    return rfc3339(value) if value is not None else None


def duration_ms(row: ExpeditionRecord) -> float | None:
    """Run time of an expedition that started, up to its end."""
    if row.started_at is None or row.completed_at is None:
        return None
    return round((as_utc(row.completed_at) - as_utc(row.started_at)).total_seconds() * 1000, 3)


def state_event(row: ExpeditionRecord, state: str) -> Event:
    """The event announcing that expedition ``row`` reached ``state``."""
    payload = {
        "expedition_id": row.expedition_id,
        "expedition_type": row.expedition_type,
        "status": row.status,
        "priority": row.priority,
        "correlation_id": row.correlation_id,
        "target_collections": row.target_collections,
        "attempts": row.attempts,
        "worker_id": row.worker_id,
        "created_at": optional_rfc3339(row.created_at),
        "started_at": optional_rfc3339(row.started_at),
        "completed_at": optional_rfc3339(row.completed_at),
        "duration_ms": duration_ms(row),
        "results": row.results,
        "errors": row.errors,
    }
    return Event(
        channel=state_channel(state),
        payload=payload,
        source=SOURCE,
        correlation_id=row.correlation_id,
    )


def queued_event(row: ExpeditionRecord) -> Event:
    """The wake-up announcing that the expedition ``row`` (a new row) is queued."""
    return Event(
        channel=QUEUED,
        payload={
            "expedition_id": row.expedition_id,
            "expedition_type": row.expedition_type,
            "priority": row.priority,
        },
        source=SOURCE,
        correlation_id=row.correlation_id,
    )
