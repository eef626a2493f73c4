"""The API views of the collector's records, and the opaque cursor of the history listing."""

from __future__ import annotations

import base64
from datetime import datetime

from conclave.collector.events import duration_ms, optional_rfc3339
from conclave.collector.models import ExpeditionRead, Progress, RecordRead
from conclave.collector.records import CollectedRecord, ExpeditionRecord
from conclave.platform.clock import rfc3339
from conclave.platform.credentials import redact
from conclave.platform.errors import BadRequest
from conclave.platform.problem_types import ProblemCode


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


def encode_cursor(row: ExpeditionRecord) -> str:
    """An opaque history cursor after ``row``."""
    raw = f"{rfc3339(row.created_at)}|{row.expedition_id}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """Read a cursor made by :func:`encode_cursor` (400 when it is not one)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment, expedition_id = raw.split("|", 1)
        return datetime.fromisoformat(moment.replace("Z", "+00:00")), expedition_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(
            "cursor must come from next_cursor.", code=ProblemCode.INVALID_CURSOR
        ) from exc
