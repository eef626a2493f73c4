"""The gateway's Prometheus metrics.

Labels are bounded and name no secret: ``/metrics`` is public (Prometheus scrapes it without a
token), so a call of a tool nobody resolved is counted under ``__unknown__`` and, with a tool
policy, a tool hidden from anyone under ``__restricted__`` — naming it, or telling a hidden name
from a missing one, would reveal to everyone what the policy hides from some
(docs/gateway.md, "Metrics").
"""

from __future__ import annotations

from conclave.gateway.policy import ToolPolicy
from conclave.gateway.tools import Tool
from conclave.platform.listener import ConsumerMetrics
from conclave.platform.metrics import ServiceMetrics

UNKNOWN_TOOL_LABEL = "__unknown__"
RESTRICTED_TOOL_LABEL = "__restricted__"


class GatewayMetrics(ServiceMetrics):
    """HTTP metrics plus tool calls, durations and validation outcomes.

    ``name_every_tool``: label every tool by its name, for a ``/metrics`` only the operators can
    reach (``GATEWAY_METRICS_NAME_EVERY_TOOL``)."""

    def __init__(self, *, name_every_tool: bool = False) -> None:
        super().__init__("gateway")
        self.name_every_tool = name_every_tool
        self.tool_calls = self.counter(
            "tool_calls_total", "Tool executions by tool and status.", ["tool", "status"]
        )
        self.tool_duration = self.histogram(
            "tool_duration_seconds", "Tool execution duration by tool.", ["tool"]
        )
        self.validation = self.counter(
            "validation_total", "Validation outcomes (orthodoxy status).", ["outcome"]
        )
        self.consumed = ConsumerMetrics(self)
        """Bus events the gateway reads (MCP cancellations relayed from other replicas)."""

    def tool_label(self, policy: ToolPolicy, tool: Tool | None) -> str:
        """The ``tool`` label of a call of ``tool`` (``None``: the call resolved no tool, or
        one hidden from its caller, which the caller was told does not exist)."""
        if tool is None:
            return UNKNOWN_TOOL_LABEL
        if self.name_every_tool or policy.listed_by_everyone(tool):
            return tool.name
        return RESTRICTED_TOOL_LABEL

    def observe(self, tool: str, status: str, orthodoxy: str, seconds: float) -> None:
        """Count one finished call (``tool``: its label, :meth:`tool_label`)."""
        self.child(self.tool_calls, tool, status).inc()
        self.child(self.validation, orthodoxy).inc()
        if status not in ("rejected",):
            self.child(self.tool_duration, tool).observe(seconds)
