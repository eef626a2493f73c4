"""HTTP routes of the edge intake service (thin: the pipeline lives in :mod:`service`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.routing import APIRoute

from conclave import __version__
from conclave.edge import integrity, store
from conclave.edge.events import CHANNEL
from conclave.edge.media import media_type_or_404
from conclave.edge.models import (
    ChainVerifyResult,
    Delivery,
    EventPage,
    EvidencePack,
    IntakeEvent,
    PackReceipt,
    UploadResponse,
    VerifyResult,
)
from conclave.edge.pack_log import receipt_path
from conclave.edge.records import OutboxState, PackEvent, PackLeaf
from conclave.edge.service import IntakeService, UploadCommand
from conclave.platform.auth import ACTING_USER_HEADER, Principal
from conclave.platform.clock import rfc3339, utc_now
from conclave.platform.errors import BadRequest, NotFound
from conclave.platform.http import CurrentPrincipal, correlation_id
from conclave.platform.media_types import media_type_names
from conclave.platform.middleware import declared_length
from conclave.platform.openapi import BEARER_SECURITY, HEALTH_RESPONSES, problem_responses
from conclave.platform.problem_types import ProblemCode

router = APIRouter()
PREFIX = "/api/edge-intake"
UPLOAD_PATH = PREFIX + "/{media_type}"
# Chain positions are BIGINT in the store: a larger number from a client cannot be bound to a
# query (the driver raises), so it is refused at the edge of the API.
MAX_SEQ = 2**63 - 1


# ``async def``: FastAPI runs a plain ``def`` dependency in its thread pool, a thread hop
# per request (conclave.platform.http).
async def _service(request: Request) -> IntakeService:
    return request.app.state.edge  # type: ignore[no-any-return]


Service = Annotated[IntakeService, Depends(_service)]


def own_only(principal: Principal) -> str | None:
    """Whose packs ``principal`` reads: ``None`` for everyone's (an operator, or anyone with
    authentication off), else the user's own uploads."""
    return None if principal.is_operator else principal.user_id


@router.get("/health", tags=["operations"], responses=HEALTH_RESPONSES)
async def health(service: Service) -> JSONResponse:
    """Service health: relational store, bus and blob store; 503 when one is down."""
    checks = await service.platform.check()
    checks["blob_store"] = {"status": "up" if service.blobs.check() else "down"}
    store_up = checks["store"]["status"] == "up"
    bus_up = checks["bus"]["status"] == "up"
    blobs_up = checks["blob_store"]["status"] == "up"
    healthy = store_up and bus_up and blobs_up
    body: dict[str, Any] = {
        "service": "edge",
        "version": __version__,
        "status": "healthy" if healthy else "unhealthy",
        "timestamp": rfc3339(utc_now()),
        "reldb": "connected" if store_up else "disconnected",
        "bus": "connected" if bus_up else "disconnected",
        "blob_store": "available" if blobs_up else "unavailable",
        "checks": checks,
    }
    warnings = service.platform.warnings()
    if warnings:  # the service serves: still 200
        body["warnings"] = warnings
    return JSONResponse(body, status_code=200 if healthy else 503)


def _header(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": False,
        "description": description,
        "schema": {"type": "string"},
    }


_UPLOAD_OPENAPI: dict[str, Any] = {
    "parameters": [
        {
            "name": "media_type",
            "in": "path",
            "required": True,
            "description": f"One of: {', '.join(media_type_names())}.",
            "schema": {"type": "string"},
        },
        _header("Idempotency-Key", "A retry with the same key answers the first upload."),
        _header("X-Conclave-Signature", "HMAC-SHA256 of the body (signed devices)."),
        _header("X-Conclave-Timestamp", "Unix seconds the signature was made at."),
        _header("X-Conclave-Nonce", "A fresh random value per signed request."),
    ],
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                        },
                        "metadata": {"type": "string", "description": "JSON object"},
                        "sampling_policy_ref": {"type": "string"},
                        "correlation_id": {"type": "string"},
                        "idempotency_key": {"type": "string"},
                    },
                }
            }
        },
    },
    "security": BEARER_SECURITY,
}


@router.post(
    UPLOAD_PATH,
    tags=["intake"],
    response_model=UploadResponse,
    openapi_extra=_UPLOAD_OPENAPI,
    responses=problem_responses(
        400,
        401,
        404,
        413,
        415,
        422,
        503,
        s400="Malformed or truncated multipart body (MALFORMED_MULTIPART, TRUNCATED_UPLOAD)",
        s401="Missing or invalid credentials or signature (UNAUTHORIZED, INVALID_TOKEN, "
        "TOKEN_EXPIRED, SIGNATURE_REQUIRED, INVALID_SIGNATURE, SIGNATURE_EXPIRED, "
        "NONCE_REQUIRED, INVALID_NONCE, REPLAYED_REQUEST)",
        s404="Unknown media type (UNKNOWN_MEDIA_TYPE; the known ones are listed)",
        s413="A file, a field or the count of files or fields exceeds its limit",
        s415="Not multipart, or the file's bytes are not a format of this type",
        s422="Empty, missing or corrupt file, bad metadata or coordinates",
        s503="Store unavailable, or every parser worker busy (STORE_UNAVAILABLE, PARSERS_BUSY "
        "with Retry-After): nothing was stored",
    ),
)
async def upload(request: Request) -> Response:
    """Upload one or more files of a media type; each becomes an immutable Evidence Pack."""
    # The service's hot route, answered through a fast lane (conclave.platform.fast_lane) for
    # each known media type: it reads its own headers instead of declaring them as FastAPI
    # dependencies (solving those cost a tenth of the service's CPU per upload);
    # `openapi_extra` documents what it reads.
    state, headers = request.app.state, request.headers
    service: IntakeService = state.edge
    principal = await state.authenticator.authenticate_async(
        headers.get("authorization"), headers.get(ACTING_USER_HEADER)
    )
    command = UploadCommand(
        media_type=request.path_params["media_type"],
        principal=principal,
        content_type=headers.get("content-type", ""),
        content_length=declared_length(headers.get("content-length")),
        body=request.stream(),
        correlation_id=correlation_id(request),
        idempotency_key=headers.get("idempotency-key"),
        signature=headers.get("x-conclave-signature"),
        timestamp=headers.get("x-conclave-timestamp"),
        nonce=headers.get("x-conclave-nonce"),
    )
    # A client that goes away mid-body (or is cut off at a read deadline) raises
    # ``ClientDisconnect`` out of here: the platform answers it (400 or 408).
    result = await service.upload(command)
    receipts = [_receipt(pack) for pack in result.packs if pack.log_leaf_hash is not None]
    return JSONResponse(
        {
            "status": result.status,
            "message": result.message,
            "evidence_ids": result.evidence_ids,
            "receipts": [receipt.model_dump() for receipt in receipts],
        }
    )


UPLOAD_ROUTE = next(r for r in router.routes if isinstance(r, APIRoute) and r.path == UPLOAD_PATH)


def upload_lanes(media_types: Iterable[str]) -> dict[str, dict[str, str]]:
    """The concrete upload paths the fast lane answers, with their path parameter."""
    return {f"{PREFIX}/{name}": {"media_type": name} for name in media_types}


def _receipt(pack: PackLeaf) -> PackReceipt:
    assert pack.log_leaf_hash is not None
    return PackReceipt(
        evidence_id=pack.evidence_id,
        log_leaf_hash=pack.log_leaf_hash.hex(),
        receipt=receipt_path(pack.log_leaf_hash),
    )


@router.get(PREFIX + "/pipeline", tags=["pipeline"], responses=problem_responses(503))
async def pipeline(service: Service, _principal: CurrentPrincipal) -> dict[str, Any]:
    """Ingestion pipeline figures: totals, rate, errors, outbox backlog, per-type counts."""
    return await service.pipeline()


@router.get(
    PREFIX + "/events",
    tags=["pipeline"],
    responses=problem_responses(
        400,
        404,
        503,
        s400="A cursor not from `next_cursor` (INVALID_CURSOR)",
        s404="`type` names no media type (UNKNOWN_MEDIA_TYPE)",
    ),
)
async def events(
    service: Service,
    principal: CurrentPrincipal,
    type: Annotated[str | None, Query(description="Only events of this media type.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=20, description="From `next_cursor`.")] = None,
) -> EventPage:
    """Recent evidence-created events of your uploads (everyone's, for an operator), newest
    first, with their delivery state."""
    media_type = media_type_or_404(type, service.media_types) if type else None
    # ``isdigit`` alone admits digits ``int`` refuses (superscripts); check ASCII and range too.
    valid = cursor is None or (cursor.isascii() and cursor.isdigit() and int(cursor) <= MAX_SEQ)
    if not valid:
        raise BadRequest("cursor must come from next_cursor.", code=ProblemCode.INVALID_CURSOR)
    found = await store.list_events(
        service.engine,
        media_type=media_type,
        uploaded_by=own_only(principal),
        before_seq=int(cursor) if cursor else None,
        limit=limit,
    )
    items = [_event(event) for event in found]
    more = len(found) == limit
    return EventPage(
        events=items,
        count=len(items),
        next_cursor=str(found[-1].pack.chain_seq) if more else None,
    )


def _delivery(outbox: OutboxState | None) -> Delivery:
    if outbox is None:
        return Delivery(status="published", attempts=None, published_at=None, last_error=None)
    published = outbox.published_at is not None
    status: Literal["published", "pending", "retrying", "quarantined"]
    if published:
        status = "published"
    elif outbox.quarantined_at is not None:
        status = "quarantined"  # set aside by the relay: `conclave outbox list` shows why
    else:
        status = "retrying" if outbox.attempts else "pending"
    return Delivery(
        status=status,
        attempts=outbox.attempts,
        published_at=rfc3339(outbox.published_at) if outbox.published_at else None,
        last_error=outbox.last_error,
    )


def _event(event: PackEvent) -> IntakeEvent:
    pack = event.pack
    return IntakeEvent(
        event_id=pack.event_id,
        channel=CHANNEL,
        evidence_id=pack.evidence_id,
        media_type=pack.media_type,
        sha256=pack.sha256,
        size_bytes=pack.size_bytes,
        device_id=pack.device_id,
        correlation_id=pack.correlation_id,
        created_at=rfc3339(pack.created_at),
        delivery=_delivery(event.outbox),
    )


_NOT_YOURS = "No such Evidence Pack among your uploads (EVIDENCE_NOT_FOUND; operators read all)"


@router.get(
    PREFIX + "/evidence/{evidence_id}",
    tags=["evidence"],
    responses=problem_responses(404, 503, s404=_NOT_YOURS),
)
async def get_evidence(
    evidence_id: str, service: Service, principal: CurrentPrincipal
) -> EvidencePack:
    """One of your Evidence Packs (any, for an operator): its metadata, extracted facts,
    position, and its leaf in the log ``packs`` (or, stored before the log, its chain link)."""
    row = await integrity.pack_or_404(service.engine, evidence_id, uploaded_by=own_only(principal))
    base = f"{PREFIX}/evidence/{row.evidence_id}"
    hashed = row.log_leaf_hash
    derived = ("metadata", "created_at", "content_url", "verify_url", "log_leaf_hash", "receipt")
    return EvidencePack(
        **{name: getattr(row, name) for name in EvidencePack.model_fields if name not in derived},
        metadata=row.client_metadata,
        created_at=rfc3339(row.created_at),
        log_leaf_hash=None if hashed is None else hashed.hex(),
        receipt=None if hashed is None else receipt_path(hashed),
        content_url=f"{base}/content",
        verify_url=f"{base}/verify",
    )


@router.get(
    PREFIX + "/evidence/{evidence_id}/content",
    tags=["evidence"],
    response_class=FileResponse,
    responses={
        200: {
            "description": "The bytes, with the pack's media type",
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
        },
        **problem_responses(404, 503, s404=_NOT_YOURS + ", or its bytes (CONTENT_MISSING)"),
    },
)
async def get_content(
    evidence_id: str, service: Service, principal: CurrentPrincipal
) -> FileResponse:
    """The stored bytes of one of your Evidence Packs (any, for an operator), exactly as
    uploaded."""
    row = await integrity.pack_or_404(service.engine, evidence_id, uploaded_by=own_only(principal))
    path = service.blobs.path_for(row.sha256)
    if not path.is_file():
        raise NotFound(
            "The pack's content is missing from the blob store.", code=ProblemCode.CONTENT_MISSING
        )
    return FileResponse(
        path,
        media_type=row.mime_type,
        filename=row.filename,
        headers={"X-Content-Type-Options": "nosniff", "ETag": f'"{row.sha256}"'},
    )


THUMBNAIL_MAX_AGE_SECONDS = 86_400
"""How long a browser may keep a thumbnail: a pack never changes, but a day bounds how long a
copy outlives the reader's access to it."""


@router.get(
    PREFIX + "/evidence/{evidence_id}/thumbnail",
    tags=["evidence"],
    response_class=FileResponse,
    responses={
        200: {
            "description": "A WebP of at most 256 pixels on its longer side",
            "content": {"image/webp": {"schema": {"type": "string", "format": "binary"}}},
        },
        **problem_responses(
            404,
            503,
            s404=_NOT_YOURS + ", no thumbnail (NO_THUMBNAIL: the detail says why), or its "
            "bytes (CONTENT_MISSING)",
            s503="Every parser worker busy (PARSERS_BUSY with Retry-After), or the store down",
        ),
    },
)
async def get_thumbnail(
    evidence_id: str, service: Service, principal: CurrentPrincipal
) -> FileResponse:
    """A small picture of one of your image or landscape packs (any, for an operator): made by
    a parser worker when first asked for, then kept."""
    row = await integrity.pack_or_404(service.engine, evidence_id, uploaded_by=own_only(principal))
    blob = service.blobs.path_for(row.sha256)
    path = await service.thumbnails.of(row.media_type, row.format, row.sha256, blob)
    return FileResponse(
        path,
        media_type="image/webp",
        headers={
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": f"private, max-age={THUMBNAIL_MAX_AGE_SECONDS}",
            "ETag": f'"{row.sha256}-thumbnail-v1"',
        },
    )


@router.get(
    PREFIX + "/evidence/{evidence_id}/verify",
    tags=["evidence"],
    responses=problem_responses(404, 503, s404=_NOT_YOURS),
)
async def verify_evidence(
    evidence_id: str, service: Service, principal: CurrentPrincipal
) -> VerifyResult:
    """Re-hash one of your packs' content (any pack's, for an operator); check a logged pack's
    entry and inclusion against the log ``packs``, a pack stored before the log its record and
    both chain links."""
    return await integrity.verify_pack(
        service.engine,
        service.blobs,
        evidence_id,
        service.pack_log,
        uploaded_by=own_only(principal),
    )


@router.get(
    PREFIX + "/chain/verify",
    tags=["evidence"],
    responses=problem_responses(404, 503, s404="No Evidence Pack at `after_seq` (NOT_FOUND)"),
)
async def verify_chain(
    service: Service,
    _principal: CurrentPrincipal,
    after_seq: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    content: Annotated[bool, Query(description="Also re-hash every blob (slow).")] = False,
) -> ChainVerifyResult:
    """Walk the hash chain of the packs stored before the log ``packs`` from a position; report
    gaps, broken links and modified records."""
    return await integrity.verify_chain(
        service.engine, service.blobs, after_seq=after_seq, limit=limit, content=content
    )
