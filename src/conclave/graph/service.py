"""Use cases of the graph dispatch service: dispatch a query, report health."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from conclave import __version__
from conclave.graph.events import audit_event
from conclave.graph.graph import DispatchState
from conclave.graph.heartbeat import Heartbeat
from conclave.graph.metrics import GraphMetrics
from conclave.graph.models import DispatchRequest, DispatchResponse, EntityRef, GraphHealth
from conclave.graph.runner import DispatchRunner
from conclave.platform.errors import Unprocessable
from conclave.platform.ids import new_id
from conclave.platform.outbox import outbox_write
from conclave.platform.problem_types import ProblemCode
from conclave.platform.runtime import Platform
from conclave.settings import GraphSettings

SERVICE_NAME = "api_graph"
NEVER = "never"


def spec_timestamp(moment: datetime) -> str:
    """UTC as ISO 8601 *without* zone offset: the spec's format for the graph health fields."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds")


def entity_dict(entity: str | EntityRef) -> dict[str, Any]:
    """One validated entity as an object whose ``id`` is a string."""
    if isinstance(entity, str):
        return {"id": entity}
    return {**entity.model_dump(), "id": str(entity.id)}


@dataclass(frozen=True)
class DispatchCommand:
    """A validated dispatch request plus who asks and under which correlation id."""

    request: DispatchRequest
    user_id: str | None
    correlation_id: str | None


class DispatchService:
    """Runs dispatches through the compiled graph; audits them when monitoring is on."""

    def __init__(
        self,
        settings: GraphSettings,
        runner: DispatchRunner,
        platform: Platform,
        heartbeat: Heartbeat,
        metrics: GraphMetrics,
    ) -> None:
        self.settings = settings
        self.runner = runner
        self.platform = platform
        self.heartbeat = heartbeat
        self.metrics = metrics

    def _check_limits(self, request: DispatchRequest) -> None:
        limit = self.settings.max_query_chars
        if len(request.query) > limit:
            raise Unprocessable(
                f"The query has {len(request.query)} characters; at most {limit} are accepted.",
                code=ProblemCode.QUERY_TOO_LONG,
                errors=[
                    {"field": "query", "message": f"at most {limit} characters", "type": "too_long"}
                ],
            )
        if len(request.validated_entities) > self.settings.max_entities:
            raise Unprocessable(
                f"At most {self.settings.max_entities} validated entities are accepted.",
                code=ProblemCode.TOO_MANY_ENTITIES,
                errors=[
                    {"field": "validated_entities", "message": "too many items", "type": "too_long"}
                ],
            )

    async def dispatch(self, command: DispatchCommand) -> DispatchResponse:
        """Run one query through the graph; every call starts from a fresh state."""
        request = command.request
        self._check_limits(request)
        started = time.perf_counter()
        trace_id = new_id()
        # The list fields (results, steps, warnings, degraded) start empty on their own: every
        # input key is one more channel write in LangGraph's input step.
        state: DispatchState = {
            "query": request.query,
            "language": request.language,
            "entities": [entity_dict(entity) for entity in request.validated_entities],
            "user_id": command.user_id,
            "correlation_id": command.correlation_id,
            "trace_id": trace_id,
        }
        final: DispatchState = await self.runner.run(state)  # type: ignore[assignment]
        duration = time.perf_counter() - started
        response = DispatchResponse(
            route=final.get("route") or "_".join(final.get("steps", [])),
            intent=final.get("intent", "unknown"),
            intent_confidence=round(float(final.get("intent_confidence", 0.0)), 4),
            entities=final.get("entities", []),
            results=final.get("results", []),
            trace_id=trace_id,
            duration_ms=round(duration * 1000, 3),
            language=request.language,
            warnings=final.get("warnings", []),
            degraded=final.get("degraded", []),
        )
        self.metrics.dispatches.labels(response.route, response.intent).inc()
        self.metrics.dispatch_duration.labels(response.route).observe(duration)
        for step in response.degraded:
            self.metrics.degraded.labels(step).inc()
        if self.settings.audit_monitoring:
            # Committed before answering: an audited dispatch is never answered unaudited.
            event = audit_event(
                response,
                query=command.request.query,
                user_id=command.user_id,
                correlation_id=command.correlation_id,
            )
            await self.platform.writer.write(outbox_write(event))
        return response

    def health(self) -> GraphHealth:
        """The spec's health body; ``status`` is ``healthy`` only while the heartbeat is on time."""
        report = self.heartbeat.report()
        return GraphHealth(
            status="healthy" if report.healthy else "unhealthy",
            service=SERVICE_NAME,
            timestamp=spec_timestamp(datetime.now(UTC)),
            version=__version__,
            audit_monitoring="enabled" if self.settings.audit_monitoring else "disabled",
            heartbeat_count=report.count,
            last_heartbeat=spec_timestamp(report.last_beat) if report.last_beat else NEVER,
            supervisor_anti_restart=report.state,
            # The relay's last count: liveness does no I/O of its own.
            warnings=self.platform.warnings() or None,
        )
