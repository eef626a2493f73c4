"""The API views of the collector's records."""

from __future__ import annotations

from conclave.collector.events import duration_ms, optional_rfc3339
from conclave.collector.models import ExpeditionRead, Progress, RecordRead
from conclave.collector.records import CollectedRecord, ExpeditionRecord
from conclave.platform.clock import rfc3339
from conclave.platform.credentials import redact


def expedition_read(row: ExpeditionRecord) -> ExpeditionRead:
    """The API view of an expedition row."""
    return ExpeditionRead(
        expedition_id=row.expedition_id,
        expedition_type=row.expedition_type,
        status=row.status,
        priority=row.priority,
        progress=Progress(**row.progress),
        agents_deployed=list(row.agents_deployed),
        results=row.results,
        errors=list(row.errors),
        attempts=row.attempts,
        correlation_id=row.correlation_id,
        target_collections=list(row.target_collections),
        parameters=redact(dict(row.parameters)),
        requested_by=row.requested_by,
        worker_id=row.worker_id,
        timeout_seconds=row.timeout_seconds,
        created_at=rfc3339(row.created_at),
        started_at=optional_rfc3339(row.started_at),
        completed_at=optional_rfc3339(row.completed_at),
        duration_ms=duration_ms(row),
    )


def record_read(row: CollectedRecord) -> RecordRead:
    """The API view of a collected record."""
    return RecordRead(
        collection=row.collection,
        record_key=row.record_key,
        content_hash=row.content_hash,
        data=row.data,
        source=row.source,
        expedition_id=row.expedition_id,
        correlation_id=row.correlation_id,
        vector_pending=bool(row.vector_pending),
        created_at=rfc3339(row.created_at),
        updated_at=rfc3339(row.updated_at),
    )
