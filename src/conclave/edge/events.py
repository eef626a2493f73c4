"""The bus channel the edge publishes on, and the event of one new Evidence Pack."""

from __future__ import annotations

from conclave.edge.records import NewEvidencePack
from conclave.platform.bus.base import Event
from conclave.platform.clock import rfc3339

CHANNEL = "edge_intake.evidence.created"
"""One event per Evidence Pack, written to the outbox in the pack's transaction."""
SOURCE = "edge"


def evidence_created(pack: NewEvidencePack) -> Event:
    """The event of a new pack: what a consumer needs without asking the edge, and where the
    bytes are (``content_path``)."""
    payload = {
        "evidence_id": pack.evidence_id,
        "type": pack.media_type,
        "format": pack.format,
        "sha256": pack.sha256,
        "size": pack.size_bytes,
        "mime_type": pack.mime_type,
        "filename": pack.filename,
        "metadata": pack.client_metadata,
        "extracted": pack.extracted,
        "device_id": pack.device_id,
        # Whose pack it is: a consumer that copies it (the collector's Evidence bridge) keeps
        # it readable by this user and operators only, as the edge does.
        "uploaded_by": pack.uploaded_by,
        "correlation_id": pack.correlation_id,
        "idempotency_key": pack.idempotency_key,
        "part_index": pack.part_index,
        "sampling_policy_ref": pack.sampling_policy_ref,
        "content_path": f"/api/edge-intake/evidence/{pack.evidence_id}/content",
        "created_at": rfc3339(pack.created_at),
    }
    return Event(
        channel=CHANNEL,
        payload=payload,
        source=SOURCE,
        event_id=pack.event_id,
        emitted_at=pack.created_at,
        correlation_id=pack.correlation_id,
    )
