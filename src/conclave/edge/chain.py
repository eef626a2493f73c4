"""The hash chain over the Evidence Packs stored before the transparency log ``packs`` replaced it
(migration 0012): those packs keep their links, and this module still checks them.

Each pack's ``chain_hash`` is ``sha256(prev_chain_hash + ":" + sha256(canonical record))`` where the
record is every stored field of the pack except ``chain_hash`` itself. Changing any stored field,
re-ordering packs or removing one breaks a link, which :func:`verify_link` reports.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from conclave.edge.records import EvidencePack, NewEvidencePack
from conclave.platform.clock import rfc3339

GENESIS = "0" * 64
"""The ``prev_chain_hash`` of the first pack."""

CHAINED_FIELDS = (
    "evidence_id",
    "chain_seq",
    "media_type",
    "format",
    "mime_type",
    "filename",
    "sha256",
    "size_bytes",
    "client_metadata",
    "extracted",
    "device_id",
    "correlation_id",
    "idempotency_key",
    "part_index",
    "sampling_policy_ref",
    "event_id",
    "created_at",
    "prev_chain_hash",
)


def _canonical(value: Any) -> Any:
    return rfc3339(value) if isinstance(value, datetime) else value


def record_digest(record: Mapping[Any, Any]) -> str:
    """SHA-256 of the canonical JSON of the chained fields of ``record``."""
    document = {name: _canonical(record[name]) for name in CHAINED_FIELDS}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def chain_hash(record: Mapping[Any, Any]) -> str:
    """The chain hash of ``record`` (which carries its ``prev_chain_hash``)."""
    link = f"{record['prev_chain_hash']}:{record_digest(record)}"
    return hashlib.sha256(link.encode()).hexdigest()


def link(pack: NewEvidencePack, chain_seq: int, prev_chain_hash: str) -> EvidencePack:
    """``pack`` chained at position ``chain_seq``, after the pack hashed ``prev_chain_hash``, as
    packs were stored before the log (the migration's tests write such packs)."""
    columns = {**pack.columns(), "chain_seq": chain_seq, "prev_chain_hash": prev_chain_hash}
    return EvidencePack(**columns, chain_hash=chain_hash(columns), log_leaf_hash=None)
