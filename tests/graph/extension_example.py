"""The extension example of docs/graph.md: a `weather` node behind a conditional edge."""

from __future__ import annotations

from typing import Any

from langgraph.graph import StateGraph

from conclave.graph.graph import DispatchState, GraphContext


async def weather(state: DispatchState) -> dict[str, Any]:
    """Answer weather questions from a deployment's own source (here: a fixed forecast)."""
    return {
        "steps": ["weather"],
        "results": [{"kind": "forecast", "text": "sunny", "query": state.get("text", "")}],
    }


async def route_after_intent(state: DispatchState) -> str:
    """Weather questions go to `weather`, everything else keeps the default path."""
    return "weather" if "weather" in state.get("text", "").lower() else "collector"


def add_weather(graph: StateGraph, context: GraphContext) -> None:
    """Add the node and the conditional edge out of `detect_intent`."""
    graph.add_node("weather", weather)
    graph.add_conditional_edges("detect_intent", route_after_intent, ["weather", "collector"])
    graph.add_edge("weather", "complete")
