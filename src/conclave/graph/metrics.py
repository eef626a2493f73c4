"""Prometheus metrics of the graph service (``conclave_graph_*``); label values are bounded.

Routes come from the compiled graph's node names and intents from the intents file (plus
``unknown``), so neither grows with user input.
"""

from __future__ import annotations

from collections.abc import Callable

from conclave.platform.metrics import ServiceMetrics


class GraphMetrics(ServiceMetrics):
    """HTTP metrics plus dispatches, their duration, degraded steps and the heartbeat."""

    def __init__(self) -> None:
        super().__init__("graph")
        self.dispatches = self.counter(
            "dispatches_total", "Dispatches by route and intent.", ["route", "intent"]
        )
        self.dispatch_duration = self.histogram(
            "dispatch_duration_seconds", "Time of one dispatch through the graph.", ["route"]
        )
        self.run_dispatches = self.histogram(
            "run_dispatches",
            "Dispatches carried by one LangGraph run (coalesced runs; 1 = a dispatch ran alone).",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        )
        self.degraded = self.counter(
            "degraded_steps_total", "Dispatches whose step could not finish, by step.", ["step"]
        )
        self.heartbeats = self.gauge("heartbeats", "Heartbeats since the process started.")
        self.heartbeat_age = self.gauge(
            "heartbeat_age_seconds", "Seconds since the last heartbeat (high = stalled loop)."
        )

    def watch_heartbeat(self, count: Callable[[], float], age: Callable[[], float]) -> None:
        """Read the heartbeat at scrape time rather than pushing on every beat."""
        self.heartbeats.set_function(count)
        self.heartbeat_age.set_function(age)
