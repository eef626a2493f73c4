"""Graph dispatch service settings (spec 002, graph part)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from conclave.settings.common import CommonSettings, _split_csv


class GraphSettings(CommonSettings):
    """Graph dispatch service settings (spec 002, graph part)."""

    host: str = Field("127.0.0.1", alias="GRAPH_HOST", description="Listen address.")
    port: int = Field(8004, alias="GRAPH_PORT", description="Listen port.")
    heartbeat_seconds: float = Field(
        30.0, gt=0, alias="GRAPH_HEARTBEAT_SECONDS", description="Interval of the heartbeat task."
    )
    heartbeat_grace_seconds: float = Field(
        10.0,
        gt=0,
        alias="GRAPH_HEARTBEAT_GRACE_SECONDS",
        description="How late a heartbeat may be before /health reports the process stalled (503).",
    )
    audit_monitoring: bool = Field(
        False,
        alias="GRAPH_AUDIT_MONITORING",
        description="Publish `graph.dispatch.completed` through the outbox for every dispatch.",
    )
    max_query_chars: int = Field(
        10_000, ge=1, alias="GRAPH_MAX_QUERY_CHARS", description="Longest query accepted (422)."
    )
    max_entities: int = Field(
        100, ge=0, alias="GRAPH_MAX_ENTITIES", description="Most validated entities per dispatch."
    )
    coalesce: int = Field(
        32,
        ge=1,
        alias="GRAPH_COALESCE",
        description="Most dispatches one graph run carries: dispatches that arrive together share "
        "a LangGraph run (docs/graph.md). 1 = every dispatch runs the graph on its own.",
    )
    coalesce_runs: int = Field(
        1,
        ge=1,
        alias="GRAPH_COALESCE_RUNS",
        description="Coalesced graph runs started in the last 25 ms that may be in flight at "
        "once; later dispatches wait for the next run. Runs older than that wait on I/O and do "
        "not count. One is enough on one event loop: more only makes runs smaller.",
    )
    intents_file: Path | None = Field(
        None,
        alias="GRAPH_INTENTS_FILE",
        description="YAML/JSON file of intents and example utterances; unset = the built-in set.",
    )
    embedder: str = Field(
        "hashing",
        alias="GRAPH_EMBEDDER",
        description="Embedder of intent detection: 'hashing' or 'package.module:factory' (use "
        "the same as COLLECTOR_EMBEDDER).",
    )
    embedding_dimensions: int = Field(
        384, ge=16, alias="GRAPH_EMBEDDING_DIMENSIONS", description="Hashing embedder size."
    )
    collector_url: str = Field(
        "http://127.0.0.1:8008",
        alias="GRAPH_COLLECTOR_URL",
        description="Base URL of the expedition service the collector step asks.",
    )
    collector_token: SecretStr = Field(
        SecretStr(""),
        alias="GRAPH_COLLECTOR_TOKEN",
        description="Bearer token sent to the expedition service (when its auth is on).",
    )
    collector_timeout_seconds: float = Field(
        3.0,
        gt=0,
        alias="GRAPH_COLLECTOR_TIMEOUT_SECONDS",
        description="Time budget of the collector step; past it the dispatch answers degraded.",
    )
    collector_collections: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="GRAPH_COLLECTOR_COLLECTIONS",
        description="Collections to look in, comma separated; empty = every listed collection.",
    )
    collector_max_collections: int = Field(
        10,
        ge=1,
        alias="GRAPH_COLLECTOR_MAX_COLLECTIONS",
        description="Most collections one dispatch looks in.",
    )
    collector_search_limit: int = Field(
        5, ge=0, le=100, alias="GRAPH_COLLECTOR_SEARCH_LIMIT", description="Hits per collection."
    )
    collector_min_score: float = Field(
        0.1,
        alias="GRAPH_COLLECTOR_MIN_SCORE",
        description="Semantic hits scoring below this are not returned.",
    )
    discovery_sources: list[dict[str, object]] = Field(
        default_factory=list,
        alias="GRAPH_DISCOVERY_SOURCES",
        description="Opt-in: JSON list of discovery source specs ('{entity}' / '{entity_url}' "
        "replaced) run for an entity Conclave knows nothing about; empty = never.",
    )
    discovery_collection: str = Field(
        "default",
        alias="GRAPH_DISCOVERY_COLLECTION",
        description="Collection discovery expeditions write into.",
    )
    discovery_cooldown_seconds: float = Field(
        300.0,
        ge=0,
        alias="GRAPH_DISCOVERY_COOLDOWN_SECONDS",
        description="Per replica: no second discovery for the same entity within this time.",
    )
    extensions: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="GRAPH_EXTENSIONS",
        description="Graph extensions, comma separated 'package.module:function'.",
    )

    _split_lists = field_validator("collector_collections", "extensions", mode="before")(_split_csv)
