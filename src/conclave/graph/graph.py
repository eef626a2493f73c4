"""The dispatch graph: a LangGraph ``StateGraph`` normalize → detect_intent → collector → complete.

Deployments extend it with their own nodes and conditional edges through a
:data:`GraphExtension`: a function that receives the not yet compiled ``StateGraph`` and the
:class:`GraphContext` (classifier, collector lookup, settings). Default edges are added only out of
nodes an extension left without outgoing edges, so an extension that adds conditional edges out of
``detect_intent`` replaces the default ``detect_intent → collector`` edge. See docs/graph.md.

The route reported to the caller is the ``_``-joined list of ``steps`` that routing nodes append
(``collector`` then ``complete`` by default, hence ``collector_complete``).
"""

from __future__ import annotations

import asyncio
import importlib
import operator
import re
import unicodedata
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from conclave.graph.collector_client import CollectorLookup
from conclave.graph.intents import IntentClassifier, IntentMatch
from conclave.platform.embedding import HashingEmbedder
from conclave.settings import GraphSettings

_SPACES = re.compile(r"\s+")
# The hashing embedder takes less for a sentence than a thread hop: it runs inline. Longer texts
# (up to the query limit, far longer to embed) and any other embedder run in a worker thread so
# the event loop keeps serving other dispatches and the heartbeat (docs/benchmarks.md).
_INLINE_CHARS = 256


class DispatchState(TypedDict, total=False):
    """The state one dispatch carries through the graph; every dispatch starts from a fresh one.

    List fields with a reducer accumulate what nodes return; the rest are overwritten.
    """

    query: str
    text: str
    language: str | None
    entities: list[dict[str, Any]]
    user_id: str | None
    correlation_id: str | None
    trace_id: str
    intent: str
    intent_confidence: float
    lookup: bool
    results: Annotated[list[dict[str, Any]], operator.add]
    steps: Annotated[list[str], operator.add]
    warnings: Annotated[list[str], operator.add]
    degraded: Annotated[list[str], operator.add]
    route: str


@dataclass(frozen=True)
class GraphContext:
    """What nodes (built-in and extension ones) may use."""

    settings: GraphSettings
    classifier: IntentClassifier
    collector: CollectorLookup


class _Node(Protocol):
    """A built-in node (a protocol, not a ``Callable``: LangGraph's node types name ``state``)."""

    def __call__(self, state: DispatchState) -> Awaitable[dict[str, Any]]: ...


GraphExtension = Callable[[StateGraph[DispatchState], GraphContext], None]
"""Adds nodes and edges to the dispatch graph before it is compiled."""


def normalize_text(query: str) -> str:
    """Unicode NFKC, whitespace collapsed, trimmed (case is kept: search may care)."""
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", query)).strip()


async def classify(classifier: IntentClassifier, text: str) -> IntentMatch:
    """Classify ``text``, off the event loop when that is more than trivial CPU work."""
    if (remembered := classifier.remembered(text)) is not None:
        return remembered
    # An exact type check: a subclass of the hashing embedder may do more work per text.
    if len(text) <= _INLINE_CHARS and type(classifier.embedder) is HashingEmbedder:
        return classifier.classify(text)
    return await asyncio.to_thread(classifier.classify, text)


def _normalize_node(_context: GraphContext) -> _Node:
    async def normalize(state: DispatchState) -> dict[str, Any]:
        return {"text": normalize_text(state.get("query", ""))}

    return normalize


def _intent_node(context: GraphContext) -> _Node:
    async def detect_intent(state: DispatchState) -> dict[str, Any]:
        match = await classify(context.classifier, state.get("text", ""))
        return {
            "intent": match.intent,
            "intent_confidence": match.confidence,
            "lookup": match.lookup,
        }

    return detect_intent


def _collector_node(context: GraphContext) -> _Node:
    async def collector(state: DispatchState) -> dict[str, Any]:
        text = state.get("text", "") if state.get("lookup", True) else ""
        outcome = await context.collector.lookup(
            text,
            state.get("entities", []),
            correlation_id=state.get("correlation_id"),
            user=state.get("user_id"),
        )
        known = outcome.known
        entities = [
            {**entity, "known": known.get(entity["id"]) if known is not None else None}
            for entity in state.get("entities", [])
        ]
        return {
            "entities": entities,
            "results": outcome.results,
            "warnings": outcome.warnings,
            "degraded": ["collector"] if outcome.degraded else [],
            "steps": ["collector"],
        }

    return collector


async def _complete(state: DispatchState) -> dict[str, Any]:
    steps = [*state.get("steps", []), "complete"]
    return {"steps": ["complete"], "route": state.get("route") or "_".join(steps)}


_DEFAULT_EDGES = (
    ("normalize", "detect_intent"),
    ("detect_intent", "collector"),
    ("collector", "complete"),
    ("complete", END),
)


def define_graph(
    context: GraphContext, extensions: Iterable[GraphExtension] = ()
) -> StateGraph[DispatchState]:
    """The dispatch graph with the extensions' nodes and edges, not compiled: the service
    compiles it for coalesced or solo runs (:mod:`conclave.graph.runner`)."""
    graph = StateGraph(DispatchState)
    graph.add_node("normalize", _normalize_node(context))
    graph.add_node("detect_intent", _intent_node(context))
    graph.add_node("collector", _collector_node(context))
    graph.add_node("complete", _complete)
    graph.add_edge(START, "normalize")
    for extend in extensions:
        extend(graph, context)
    for source, target in _DEFAULT_EDGES:
        has_edge = any(start == source for start, _end in graph.edges)
        if not has_edge and source not in graph.branches:
            graph.add_edge(source, target)
    return graph


def build_graph(
    context: GraphContext, extensions: Iterable[GraphExtension] = ()
) -> CompiledStateGraph[DispatchState]:
    """The dispatch graph compiled for one dispatch per run (no checkpointer: a dispatch keeps no
    state afterwards)."""
    return define_graph(context, extensions).compile()


def load_extension(spec: str) -> GraphExtension:
    """The extension function named ``package.module:function``."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"graph extension {spec!r} is not 'package.module:function'")
    extension = getattr(importlib.import_module(module_name), attribute)
    if not callable(extension):
        raise TypeError(f"graph extension {spec!r} is not callable")
    return extension  # type: ignore[no-any-return]
