"""The graph's bus channel and the payload of the audit event every dispatch publishes on it."""

from __future__ import annotations

from conclave.graph.models import DispatchResponse
from conclave.platform.bus.base import Event

AUDIT_CHANNEL = "graph.dispatch.completed"
SOURCE = "graph"


def audit_event(
    response: DispatchResponse, *, query: str, user_id: str | None, correlation_id: str | None
) -> Event:
    """The audit event of one answered dispatch."""
    # The query text stays out of the audit trail (it may carry personal data); its length and
    # the entity ids are enough to correlate.
    payload = {
        "trace_id": response.trace_id,
        "route": response.route,
        "intent": response.intent,
        "intent_confidence": response.intent_confidence,
        "duration_ms": response.duration_ms,
        "correlation_id": correlation_id,
        "user_id": user_id,
        "language": response.language,
        "query_chars": len(query),
        "entity_ids": [entity["id"] for entity in response.entities],
        "results": len(response.results),
        "degraded": response.degraded,
    }
    return Event(
        channel=AUDIT_CHANNEL, payload=payload, source=SOURCE, correlation_id=correlation_id
    )
