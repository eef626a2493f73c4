"""Request and response models of the graph dispatch service's HTTP API."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr


class EntityRef(BaseModel):
    """A validated entity given as an object: ``id`` is required, other fields are kept."""

    model_config = ConfigDict(extra="allow")

    id: StrictStr | StrictInt = Field(description="The entity's identifier (a record key).")


class DispatchRequest(BaseModel):
    """A query and the entities an upstream step already validated."""

    query: StrictStr = Field(
        description="User text; an empty string is accepted and answered normally."
    )
    validated_entities: list[StrictStr | EntityRef] = Field(
        default_factory=list, description="Entity ids, or objects with an `id`; may be empty."
    )
    user_id: str | None = Field(
        None, max_length=256, description="Caller identity, only honoured when auth is disabled."
    )
    language: str | None = Field(None, max_length=16, description="Language tag, e.g. `en`, `it`.")
    correlation_id: str | None = Field(
        None,
        max_length=128,
        pattern=r"^[A-Za-z0-9._:/@+=-]+$",
        description="Carried into the audit event (defaults to X-Correlation-ID).",
    )


class DispatchResponse(BaseModel):
    """Where the query went, what it asked for, and what Conclave knows about it."""

    route: str = Field(description="The graph path taken, e.g. `collector_complete`.")
    intent: str = Field(description="Detected intent, `unknown` when none clears its threshold.")
    intent_confidence: float = Field(description="Score of the detected intent (0 for unknown).")
    entities: list[dict[str, Any]] = Field(
        description="The validated entities as objects; `known` tells whether Conclave holds a "
        "record for the id (null when the collector could not be asked)."
    )
    results: list[dict[str, Any]] = Field(
        description="What the collector step found: `record`, `match` and `expedition` items."
    )
    trace_id: str
    duration_ms: float
    language: str | None = None
    warnings: list[str] = Field(default_factory=list)
    degraded: list[str] = Field(
        default_factory=list, description="Steps that could not finish (e.g. `collector`)."
    )


class GraphHealth(BaseModel):
    """The spec's graph health response, field for field."""

    status: str
    service: str
    timestamp: str = Field(description="UTC, ISO 8601 without zone offset (the spec's format).")
    version: str
    audit_monitoring: str
    heartbeat_count: int
    last_heartbeat: str
    supervisor_anti_restart: str
    warnings: list[str] | None = Field(
        None,
        description="Present only when an operator should look at something that does not stop "
        "the service (quarantined outbox events); the status stays healthy.",
    )
