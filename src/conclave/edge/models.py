"""Response models of the edge service's HTTP API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class PackReceipt(BaseModel):
    """Where the receipt of one Evidence Pack's leaf in the log ``packs`` is served."""

    evidence_id: str
    log_leaf_hash: str = Field(description="The RFC 9162 leaf hash of the pack's entry (hex).")
    receipt: str = Field(
        description="`/logs/packs/receipt/by-hash/{log_leaf_hash}`: 404 LEAF_NOT_FOUND until the "
        "checkpoint covering the leaf is signed (about a second), then the receipt."
    )


class UploadResponse(BaseModel):
    """The outcome of an upload (the spec's three fields, and the packs' receipts)."""

    status: Literal["created", "duplicate"]
    message: str = Field(description="Says how many Evidence Packs were created.")
    evidence_ids: list[str]
    receipts: list[PackReceipt] = Field(
        default_factory=list,
        description="One per logged pack, in the order of `evidence_ids` (none with the log off, "
        "or for a duplicate of packs stored before the log).",
    )


class EvidencePack(BaseModel):
    """One immutable Evidence Pack."""

    evidence_id: str
    media_type: str
    format: str
    mime_type: str
    filename: str
    sha256: str
    size_bytes: int
    metadata: dict[str, Any]
    extracted: dict[str, Any]
    device_id: str
    uploaded_by: str | None = Field(
        description="The user who uploaded the pack; null for a pack stored before uploaders "
        "were recorded (only operators read those)."
    )
    correlation_id: str | None
    idempotency_key: str | None
    part_index: int
    sampling_policy_ref: str | None
    event_id: str
    created_at: str
    chain_seq: int = Field(description="The pack's position: listings page in this order.")
    prev_chain_hash: str | None = Field(
        description="The hash chain's link, for packs stored before the log `packs` (else null)."
    )
    chain_hash: str | None
    log_leaf_hash: str | None = Field(
        description="The leaf hash of the pack's entry in the log `packs` (hex), or null."
    )
    receipt: str | None = Field(description="Where the leaf's receipt is served, or null.")
    content_url: str
    verify_url: str


class Position(BaseModel):
    """A point in WGS 84 degrees, and what said so."""

    latitude: float
    longitude: float
    source: Literal["exif", "metadata"]


class EvidenceSummary(BaseModel):
    """One Evidence Pack as the search lists it: without the client's metadata or the extracted
    facts (``url`` has those)."""

    evidence_id: str
    media_type: str
    format: str
    mime_type: str
    filename: str
    sha256: str
    size_bytes: int
    device_id: str
    uploaded_by: str | None = Field(
        description="Who uploaded it; null for a pack stored before uploaders were recorded."
    )
    correlation_id: str | None
    part_index: int
    created_at: str
    log_leaf_hash: str | None = Field(
        description="The leaf hash of the pack's entry in the log `packs` (hex), or null."
    )
    url: str = Field(description="The whole pack: `/api/edge-intake/evidence/{evidence_id}`.")
    position: Position | None = Field(
        None,
        description="Where it was taken: its EXIF GPS position, else the client's `latitude`/"
        "`lat` and `longitude`/`lon` metadata; null when neither is given.",
    )


class EvidencePage(BaseModel):
    """A page of the evidence search, newest first."""

    packs: list[EvidenceSummary]
    count: int
    next_cursor: str | None = Field(
        None, description="Pass as `cursor` for the next (older) page; null on the last page."
    )


class Delivery(BaseModel):
    """Where an event stands in the outbox."""

    status: Literal["published", "pending", "retrying", "quarantined"]
    attempts: int | None
    published_at: str | None
    last_error: str | None


class IntakeEvent(BaseModel):
    """One ``edge_intake.evidence.created`` event and its delivery."""

    event_id: str
    channel: str
    evidence_id: str
    media_type: str
    sha256: str
    size_bytes: int
    device_id: str
    correlation_id: str | None
    created_at: str
    delivery: Delivery


class EventPage(BaseModel):
    """A page of events, newest first."""

    events: list[IntakeEvent]
    count: int
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page.")


class VerifyResult(BaseModel):
    """Integrity of one Evidence Pack: its content, and either its chain links (a pack stored
    before the log ``packs``) or its leaf in the log."""

    evidence_id: str
    valid: bool
    content: dict[str, Any]
    record: dict[str, Any] | None = Field(
        description="A chained pack's record hash, recomputed (null for a logged pack)."
    )
    links: dict[str, Any] | None = Field(
        description="A chained pack's links to its neighbours (null for a logged pack)."
    )
    log: dict[str, Any] | None = Field(
        description="A logged pack against the log `packs`: `state` (included, pending, "
        "not_found, not_logged, unchecked, log_corrupted), `entry_ok` (the entry rebuilt from the "
        "row is the leaf's data), `content_ok` (the stored bytes hash to the entry's sha256), "
        "`included` (the leaf is under the latest checkpoint, proven with the log's keys), "
        "`index`, `checkpoint_size`, `leaf_hash`, `receipt`, `ok` (null while nothing could be "
        "checked yet); null for a chained pack."
    )


class ChainVerifyResult(BaseModel):
    """Integrity of a stretch of the chain."""

    valid: bool
    checked: int
    problems: list[dict[str, Any]]
    head: dict[str, Any]
    next_after_seq: int | None
