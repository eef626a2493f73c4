"""``GET /api/edge-intake/evidence``: the Evidence Pack search (who may list whose packs, the
filters, the keyset pages); the query itself is :mod:`conclave.edge.evidence_search`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from conclave.edge.api import PREFIX, Service, own_only
from conclave.edge.evidence_search import PackFilter, position_of, search_packs
from conclave.edge.media import media_type_or_404
from conclave.edge.models import (
    EvidencePage,
    EvidenceSummary,
    Position,
)
from conclave.platform.clock import rfc3339
from conclave.platform.db.engine import store_errors
from conclave.platform.errors import Forbidden
from conclave.platform.http import CurrentPrincipal
from conclave.platform.keyset import CURSOR_MAX_LENGTH, UtcMoment, decode_cursor, page_of
from conclave.platform.openapi import problem_responses

router = APIRouter()


@router.get(
    PREFIX + "/evidence",
    tags=["evidence"],
    responses=problem_responses(
        400,
        403,
        404,
        503,
        s400="A cursor not from `next_cursor` (INVALID_CURSOR)",
        s403="`user_id` names another user, and you are no operator (FORBIDDEN)",
        s404="`type` names no media type (UNKNOWN_MEDIA_TYPE)",
    ),
)
async def search_evidence(
    service: Service,
    principal: CurrentPrincipal,
    type: Annotated[str | None, Query(description="Only packs of this media type.")] = None,
    device_id: Annotated[str | None, Query(max_length=256)] = None,
    correlation_id: Annotated[str | None, Query(max_length=128)] = None,
    user_id: Annotated[
        str | None, Query(max_length=256, description="Who uploaded (operators: anyone).")
    ] = None,
    since: Annotated[UtcMoment | None, Query(description="Created at or after (RFC 3339).")] = None,
    until: Annotated[UtcMoment | None, Query(description="Created before (RFC 3339).")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=CURSOR_MAX_LENGTH, description="From `next_cursor`.")
    ] = None,
) -> EvidencePage:
    """Your Evidence Packs (anyone's for an operator, or by `user_id`), newest first, filtered
    by media type, device, correlation id and creation time; summaries without metadata and
    extracted facts (`GET /evidence/{id}` has those)."""
    own = own_only(principal)
    if user_id is not None and own is not None and user_id != own:
        raise Forbidden("Only operators may list another user's Evidence Packs.")
    media_type = media_type_or_404(type, service.media_types) if type else None
    after = decode_cursor(cursor) if cursor else None
    kept = PackFilter(
        uploaded_by=own if own is not None else user_id,
        media_type=media_type,
        device_id=device_id,
        correlation_id=correlation_id,
        since=since,
        until=until,
    )
    with store_errors():
        # One row more than the page: whether a next page exists is known, not guessed.
        rows = await search_packs(service.engine, kept, after, limit + 1)
    found, next_cursor = page_of(rows, limit, lambda row: (row.created_at, row.evidence_id))
    packs = [_summary(row) for row in found]
    return EvidencePage(packs=packs, count=len(packs), next_cursor=next_cursor)


def _summary(row: Any) -> EvidenceSummary:
    hashed = row.log_leaf_hash
    return EvidenceSummary(
        evidence_id=row.evidence_id,
        media_type=row.media_type,
        format=row.format,
        mime_type=row.mime_type,
        filename=row.filename,
        sha256=row.sha256,
        size_bytes=row.size_bytes,
        device_id=row.device_id,
        uploaded_by=row.uploaded_by,
        correlation_id=row.correlation_id,
        part_index=row.part_index,
        created_at=rfc3339(row.created_at),
        log_leaf_hash=None if hashed is None else hashed.hex(),
        url=f"{PREFIX}/evidence/{row.evidence_id}",
        position=None if (found := position_of(row)) is None else Position(**found),
    )
