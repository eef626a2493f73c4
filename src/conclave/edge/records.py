"""The records the edge passes between its layers (service, store, integrity, api).

Typed, so that mypy follows a pack from the upload to the row and back; ``Any`` is left to the
JSON documents a pack carries (the client's metadata, the extracted facts). The HTTP shapes are
the pydantic models of :mod:`conclave.edge.models`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class NewEvidencePack:
    """An Evidence Pack as the service builds it, before the store gives it its position."""

    evidence_id: str
    media_type: str
    format: str
    mime_type: str
    filename: str
    sha256: str
    size_bytes: int
    client_metadata: dict[str, Any]
    extracted: dict[str, Any]
    device_id: str
    correlation_id: str | None
    idempotency_key: str | None
    part_index: int
    sampling_policy_ref: str | None
    event_id: str
    created_at: datetime
    uploaded_by: str | None = field(default=None, kw_only=True)
    """The authenticated user who uploaded the pack (the acting user of a service uploading for
    one); ``None`` for a pack stored before ownership was recorded (migration 0015)."""

    def columns(self) -> dict[str, Any]:
        """The record as column values (the JSON documents shared, not copied)."""
        return {column.name: getattr(self, column.name) for column in fields(self)}


@dataclass(frozen=True)
class EvidencePack(NewEvidencePack):
    """A stored Evidence Pack: every column of its row. A pack stored before the log ``packs``
    (migration 0012) has its link in the hash chain and no leaf hash; a pack stored since has
    the leaf hash of its entry in the log (``None`` with ``EDGE_PACK_LOG`` off) and no link."""

    chain_seq: int
    prev_chain_hash: str | None
    chain_hash: str | None
    log_leaf_hash: bytes | None

    @property
    def chained(self) -> bool:
        """Whether the pack is a link of the hash chain (stored before the log ``packs``)."""
        return self.chain_hash is not None


@dataclass(frozen=True)
class PackLeaf:
    """An Evidence Pack's id and the leaf hash of its entry in the log ``packs`` (``None`` for a
    pack not logged: chained before the log, or stored with the log off)."""

    evidence_id: str
    log_leaf_hash: bytes | None


@dataclass(frozen=True)
class ChainLink:
    """A pack's position and hashes, enough to check its links to its neighbours."""

    chain_seq: int
    chain_hash: str
    prev_chain_hash: str


@dataclass(frozen=True)
class ChainHead:
    """The newest pack's position and chain hash (zero and the genesis hash when empty)."""

    chain_seq: int
    chain_hash: str


@dataclass(frozen=True)
class OutboxState:
    """Where a pack's event stands in the outbox."""

    attempts: int
    last_error: str | None
    published_at: datetime | None
    quarantined_at: datetime | None


@dataclass(frozen=True)
class PackEvent:
    """A pack and the delivery of its event; ``outbox`` is ``None`` once the relay pruned the
    published row."""

    pack: EvidencePack
    outbox: OutboxState | None


@dataclass(frozen=True)
class IntakeError:
    """A rejected upload, kept for the pipeline's error figures."""

    error_id: str
    occurred_at: datetime
    media_type: str | None
    status: int
    code: str
    detail: str | None
    device_id: str | None


@dataclass(frozen=True)
class PipelineFigures:
    """The counts behind the pipeline endpoint."""

    by_type: dict[str, int]
    recent: int
    last_created_at: datetime | None
    errors: int
    last_errors: list[IntakeError]
    pending: int
    failing: int
    quarantined: int
