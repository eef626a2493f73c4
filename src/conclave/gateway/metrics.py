"""The gateway's Prometheus metrics (labels are bounded: unknown tool names are not labels)."""

from __future__ import annotations

from conclave.platform.metrics import ServiceMetrics

UNKNOWN_TOOL_LABEL = "__unknown__"


class GatewayMetrics(ServiceMetrics):
    """HTTP metrics plus tool calls, durations and validation outcomes."""

    def __init__(self) -> None:
        super().__init__("gateway")
        self.tool_calls = self.counter(
            "tool_calls_total", "Tool executions by tool and status.", ["tool", "status"]
        )
        self.tool_duration = self.histogram(
            "tool_duration_seconds", "Tool execution duration by tool.", ["tool"]
        )
        self.validation = self.counter(
            "validation_total", "Validation outcomes (orthodoxy status).", ["outcome"]
        )

    def observe(self, tool: str | None, status: str, orthodoxy: str, seconds: float) -> None:
        """Count one finished call."""
        label = tool or UNKNOWN_TOOL_LABEL
        self.child(self.tool_calls, label, status).inc()
        self.child(self.validation, orthodoxy).inc()
        if status not in ("rejected",):
            self.child(self.tool_duration, label).observe(seconds)
