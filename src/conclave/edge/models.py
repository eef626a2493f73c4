"""Response models of the edge service's HTTP API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class UploadResponse(BaseModel):
    """The outcome of an upload (the spec's three fields)."""

    status: Literal["created", "duplicate"]
    message: str = Field(description="Says how many Evidence Packs were created.")
    evidence_ids: list[str]


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
    correlation_id: str | None
    idempotency_key: str | None
    part_index: int
    sampling_policy_ref: str | None
    event_id: str
    created_at: str
    chain_seq: int
    prev_chain_hash: str
    chain_hash: str
    content_url: str
    verify_url: str


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
    """Integrity of one Evidence Pack."""

    evidence_id: str
    valid: bool
    content: dict[str, Any]
    record: dict[str, Any]
    links: dict[str, Any]


class ChainVerifyResult(BaseModel):
    """Integrity of a stretch of the chain."""

    valid: bool
    checked: int
    problems: list[dict[str, Any]]
    head: dict[str, Any]
    next_after_seq: int | None
