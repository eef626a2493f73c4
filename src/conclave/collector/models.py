"""Request and response models of the expedition service."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

Priority = Literal["critical", "high", "medium", "low"]
Status = Literal["queued", "running", "completed", "failed", "cancelled"]
PRIORITY_RANK: dict[str, int] = {"critical": 0, "high": 1, "medium": 2, "low": 3}
COLLECTION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


class ExpeditionCreate(BaseModel):
    """What to run: the spec's fields (``POST /expedition/run`` and the ``requested`` event)."""

    model_config = ConfigDict(extra="forbid")

    expedition_type: str = Field(
        min_length=1, max_length=64, description="A registered type (GET /expedition/types)."
    )
    target_collections: list[str] = Field(
        default_factory=list,
        max_length=100,
        description="Collections the expedition works on; discovery writes into the first "
        "(default `default`).",
    )
    priority: Priority = Field(default="medium", description="Higher priorities run first.")
    parameters: dict[str, Any] = Field(
        default_factory=dict,
        description="Opaque to the service core; read by the type. Credentials are referenced, "
        'never given: {"secret": "<name>"} of COLLECTOR_SOURCE_SECRETS.',
    )
    correlation_id: str | None = Field(
        default=None, max_length=128, description="Carried into every event and record."
    )
    timeout_seconds: float | None = Field(
        default=None, gt=0, description="Shorter time-out than the service's default for this run."
    )

    def collections(self) -> list[str]:
        """Target collections, validated against :data:`COLLECTION_PATTERN` by the service."""
        return list(self.target_collections)


class OrchestratorTrigger(ExpeditionCreate):
    """``POST /expedition/trigger/orchestrator``: a run, optionally waited for."""

    wait_seconds: float = Field(
        0, ge=0, le=300, description="Wait this long for the expedition to finish."
    )


class Progress(BaseModel):
    """Where a running expedition is."""

    fraction: float = 0.0
    stage: str | None = None
    items_done: int = 0
    items_total: int | None = None


class ExpeditionAccepted(BaseModel):
    """Answer to a trigger: the expedition is queued."""

    expedition_id: str
    status: Status
    status_url: str
    expedition_type: str
    priority: Priority
    created_at: str


class ExpeditionRead(BaseModel):
    """The status record of one expedition."""

    expedition_id: str
    expedition_type: str
    status: Status
    priority: Priority
    progress: Progress
    agents_deployed: list[str]
    results: dict[str, Any] | None
    errors: list[dict[str, Any]]
    attempts: int
    correlation_id: str | None
    target_collections: list[str]
    parameters: dict[str, Any]
    requested_by: str | None
    worker_id: str | None
    timeout_seconds: float
    created_at: str
    started_at: str | None
    completed_at: str | None
    duration_ms: float | None


class HistoryPage(BaseModel):
    """A page of expeditions, newest first."""

    expeditions: list[ExpeditionRead]
    count: int
    next_cursor: str | None


class ExpeditionTypeInfo(BaseModel):
    """A registered expedition type."""

    name: str
    description: str


class CollectionInfo(BaseModel):
    """A collection's size in both stores."""

    name: str
    records: int
    vectors: int | None = Field(description="Points in semantic memory (null when unreachable).")
    pending_vectors: int
    updated_at: str | None


class RecordRead(BaseModel):
    """One collected record."""

    collection: str
    record_key: str
    content_hash: str
    data: Any
    source: str
    expedition_id: str | None
    correlation_id: str | None
    vector_pending: bool
    created_at: str
    updated_at: str


class SearchHit(BaseModel):
    """A record found by semantic search, with its similarity."""

    score: float
    record: RecordRead


class SearchResult(BaseModel):
    """Semantic search results, best first."""

    collection: str
    query: str
    embedder: str
    hits: list[SearchHit]
    count: int


class ScheduleCreate(ExpeditionCreate):
    """A cron schedule that triggers an expedition at every tick."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")
    cron: str = Field(min_length=1, max_length=128, description="Five-field cron, UTC.")
    enabled: bool = True


class ScheduleUpdate(BaseModel):
    """``PATCH /schedules/{name}``: pause (``enabled: false``) or resume a schedule."""

    model_config = ConfigDict(extra="forbid")

    enabled: StrictBool = Field(
        description="false pauses (no tick fires), true resumes at the next tick after now."
    )


class ScheduleRead(BaseModel):
    """A stored schedule."""

    schedule_id: str
    name: str
    cron: str
    expedition_type: str
    priority: Priority
    target_collections: list[str]
    parameters: dict[str, Any]
    enabled: bool
    next_fire_at: str
    last_fired_at: str | None
    last_expedition_id: str | None
    created_by: str | None = Field(description="Whose the schedule (and its expeditions) is.")
    created_at: str
