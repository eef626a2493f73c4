"""The outbox's records as the SDK hands them out: an item, the receipt of a pack it sent, and an
accepted upload's packs (:mod:`conclave.edge_client.store` reads and writes them)."""

from __future__ import annotations

from dataclasses import dataclass

from conclave.edge_client.envelope import Envelope


@dataclass(frozen=True)
class OutboxItem:
    """One row of the outbox. ``auto_retry`` is true for a FAILED item that sync will try again
    by itself at ``next_attempt_at`` (Unix seconds); ``sending`` while a sync run holds it."""

    id: int
    state: str
    attempts: int
    envelope: Envelope
    sampling_policy_ref: str | None
    idempotency_key: str
    last_error: str | None
    auto_retry: bool
    next_attempt_at: float
    evidence_ids: list[str]
    updated_at: float
    sending: bool


@dataclass(frozen=True)
class StoredReceipt:
    """The receipt of one Evidence Pack the device sent, as the server linked it: ``receipt``
    (the ``conclave.receipt/v1`` document) once fetched, else ``None``; what the device sent of
    the pack's file; and ``entry``, the log's entry of the pack (the leaf's data) once fetched."""

    evidence_id: str
    item_id: int
    log_leaf_hash: str
    receipt_path: str
    receipt: str | None
    fetched_at: float | None
    part_index: int | None = None
    """The file's position in its upload (the entry's ``part_index``); ``None`` for a receipt
    kept by a client that did not record what it sent."""
    sent_sha256: str | None = None
    """SHA-256 (hex) of the file's bytes as sent; ``None`` when the upload's answer named more
    packs than the files sent (or nothing was recorded)."""
    sent_size: int | None = None
    device_id: str | None = None
    """The id the server names the device by, ``None`` when the client cannot know it."""
    idempotency_key_sha256: str | None = None
    entry: bytes | None = None
    entry_fetched_at: float | None = None


@dataclass(frozen=True)
class SentUpload:
    """An upload this client saw accepted (schema version 4 on): its item and the packs its
    answer named for the files sent, each of which should have a receipt row of this item."""

    item_id: int
    evidence_ids: list[str]
