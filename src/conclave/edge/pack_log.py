"""The edge's transparency log of Evidence Packs, ``packs``: one leaf per pack, queued in the
transaction that stores the pack and its event (the log's integrator gives it its index), so
anyone holding the log's key can check that a pack the edge accepted is recorded, and that no
recorded pack was later removed or changed.

A leaf's entry is the pack's stored facts in the versioned, canonical serialisation
``conclave.pack/v1``: a JSON object with sorted keys, no white space, ASCII only (``\\uXXXX``
escapes), holding

    format                      "conclave.pack/v1"
    evidence_id, event_id       the pack's id (its row's key) and its event's id
    media_type                  the route it was uploaded to
    file_format, mime_type      what its bytes were found to be
    filename                    the stored (sanitised) file name
    sha256, size_bytes          of the stored bytes
    metadata_sha256             SHA-256 (hex) of the canonical JSON of the client's metadata
    extracted_sha256            SHA-256 (hex) of the canonical JSON of the extracted facts
    device_sha256               SHA-256 (hex) of the uploading device's id
    correlation_id_sha256, idempotency_key_sha256, sampling_policy_ref_sha256
                                SHA-256 (hex) of each, or null without one
    part_index                  the file's position in its upload
    created_at                  RFC 3339 UTC

Values a reader of the log should not learn are hashed, never written out: metadata
(coordinates), the device, a correlation id (which may carry a caller's identifiers) and an
idempotency key may be confidential. Whoever holds the pack's row recomputes every field with
:func:`pack_entry`. A hash of a value with few possible values can be found by guessing, and the
device hash says whose upload it is, so a leaf's data is served only to operators and to the
device that uploaded the pack (:func:`may_read_pack`); its hash, in every receipt, reveals
nothing without the entry.
"""

from __future__ import annotations

from typing import Any

from conclave.edge.records import NewEvidencePack
from conclave.platform.clock import rfc3339
from conclave.platform.tlog import entries
from conclave.platform.tlog.entries import (
    canonical_json,
    json_sha256,
    optional_text_sha256,
    text_sha256,
)

PACKS_LOG = "packs"
"""The name of the log (its origin is ``<CONCLAVE_TLOG_ORIGIN>/packs``)."""

PACK_FORMAT = "conclave.pack/v1"
"""The version of the entry's serialisation."""


def pack_facts(pack: NewEvidencePack) -> dict[str, Any]:
    """The facts of ``pack`` its entry holds (``conclave.pack/v1``), before serialisation."""
    return {
        "format": PACK_FORMAT,
        "evidence_id": pack.evidence_id,
        "event_id": pack.event_id,
        "media_type": pack.media_type,
        "file_format": pack.format,
        "mime_type": pack.mime_type,
        "filename": pack.filename,
        "sha256": pack.sha256,
        "size_bytes": pack.size_bytes,
        "metadata_sha256": json_sha256(pack.client_metadata),
        "extracted_sha256": json_sha256(pack.extracted),
        "device_sha256": text_sha256(pack.device_id),
        "correlation_id_sha256": optional_text_sha256(pack.correlation_id),
        "idempotency_key_sha256": optional_text_sha256(pack.idempotency_key),
        "sampling_policy_ref_sha256": optional_text_sha256(pack.sampling_policy_ref),
        "part_index": pack.part_index,
        "created_at": rfc3339(pack.created_at),
    }


def pack_entry(pack: NewEvidencePack) -> bytes:
    """The leaf entry of ``pack`` (``conclave.pack/v1``): built from the pack as the service
    stores it, and again from its stored row to check the row against the log."""
    return canonical_json(pack_facts(pack))


may_read_pack = entries.owner_reads("device_sha256")
"""Operators, and the device whose pack it is, read a leaf's data (its ``device_sha256`` is
theirs)."""


def receipt_path(hashed: bytes) -> str:
    """Where the receipt of the pack whose leaf hash is ``hashed`` is served (relative to the
    edge)."""
    return entries.receipt_path(PACKS_LOG, hashed)
