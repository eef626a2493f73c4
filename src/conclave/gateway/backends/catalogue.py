"""Declarative HTTP tools: a YAML or JSON catalogue file turned into registered tools.

Format (one entry per tool)::

    tools:
      - name: screen_entities
        description: Screen entities against criteria.
        backend: neural_engine        # orchestrator neural_engine vee_engine pattern_weavers
                                      # or Conclave's own: edge collector graph
        # url: https://example.org/api  # instead of backend: any absolute base URL
        method: POST
        path: /screen                     # may hold {argument} placeholders
        parameters: {type: object, properties: {...}, required: [...]}
        arguments: {criteria: criteria}   # optional: request field -> argument name
        result_field: results             # optional: take this field of the JSON answer
        timeout_seconds: 10
        retries: 2                        # used only when annotations.idempotentHint is true
        annotations: {readOnlyHint: true, idempotentHint: true}
        tags: [entities]
        fallback: signals_table           # optional: local answer when the backend is unset

The same file may declare upstream MCP servers under ``mcp_servers:`` (format in
:mod:`conclave.gateway.upstreams.config`) and who may list and call which tools under ``policy:``
(format in :mod:`conclave.gateway.policy`).

A schema in ``parameters`` may say ``enum_from: media_types`` instead of listing an ``enum``: the
loader fills in the names of every registered media type (:mod:`conclave.platform.media_types`,
plug-ins included), so the catalogue never holds a copy of that list.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import httpx
import yaml
from pydantic import BaseModel, Field, ValidationError

from conclave.gateway.backends.breaker import CircuitBreaker
from conclave.gateway.backends.http_tool import Fallback, HttpCall, http_executor
from conclave.gateway.policy import PolicySpec, policy_context
from conclave.gateway.tools import Tool
from conclave.gateway.upstreams.config import McpServerSpec
from conclave.platform.auth import BUILT_IN_ROLES
from conclave.platform.media_types import media_type_names

ENV_OF_BACKEND = {
    "orchestrator": "ORCHESTRATOR_URL + ORCHESTRATOR_API",
    "neural_engine": "NEURAL_ENGINE_API",
    "vee_engine": "VEE_ENGINE_API",
    "pattern_weavers": "PATTERN_WEAVERS_API",
    "edge": "GATEWAY_EDGE_URL",
    "collector": "GATEWAY_COLLECTOR_URL",
    "graph": "GATEWAY_GRAPH_URL",
}
# The services of Conclave itself: called with the gateway's service token, on behalf of the
# calling user (X-Conclave-Acting-User; the gateway's user must have the service role there).
CONCLAVE_SERVICES = ("edge", "collector", "graph")
ENTITY_TOOLS = Path(__file__).with_name("entity_tools.yaml")
PLATFORM_TOOLS = Path(__file__).with_name("platform_tools.yaml")
# The lists a catalogue names with ``enum_from`` instead of copying them.
ENUM_SOURCES: dict[str, Callable[[], tuple[str, ...]]] = {"media_types": media_type_names}


class BackendToolSpec(BaseModel):
    """One catalogue entry."""

    model_config = {"extra": "forbid"}

    name: str
    description: str
    title: str | None = None
    backend: (
        Literal[
            "orchestrator",
            "neural_engine",
            "vee_engine",
            "pattern_weavers",
            "edge",
            "collector",
            "graph",
        ]
        | None
    ) = None
    url: str | None = None
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    path: str = ""
    parameters: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None
    tags: list[str] = Field(default_factory=list)
    arguments: dict[str, str] | None = None
    result_field: str | None = None
    timeout_seconds: float = Field(10.0, gt=0, le=300)
    retries: int = Field(2, ge=0, le=10)
    fallback: str | None = None


class Catalogue(BaseModel):
    """A catalogue file: HTTP tools, and upstream MCP servers (:mod:`..upstreams.config`)."""

    tools: list[BackendToolSpec] = Field(default_factory=list)
    mcp_servers: list[McpServerSpec] = Field(default_factory=list)
    policy: PolicySpec | None = None
    """Who may list and call which tools (:mod:`conclave.gateway.policy`)."""


# Keywords whose value is data, not a schema: nothing below them is read as a directive.
_DATA_KEYWORDS = frozenset({"const", "default", "enum", "example", "examples", "dependentRequired"})
# Keywords whose value maps names to schemas: a property may well be called ``enum_from``.
_NAMED_SCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
# A schema nested deeper than this is refused (recursion would otherwise end in RecursionError).
_MAX_SCHEMA_DEPTH = 64


def fill_enums(schema: Any, depth: int = 0) -> Any:
    """``schema`` with every ``enum_from: <source>`` replaced by ``enum: [...]`` of that source.
    Only a schema's own keyword is read: not a property's name, not data (``default``,
    ``examples``, ...), not an extension keyword (``x-...``)."""
    if depth > _MAX_SCHEMA_DEPTH:
        raise ValueError(f"a schema nests deeper than {_MAX_SCHEMA_DEPTH} levels")
    if isinstance(schema, list):
        return [fill_enums(item, depth + 1) for item in schema]
    if not isinstance(schema, dict):
        return schema
    filled: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DATA_KEYWORDS or (isinstance(key, str) and key.startswith("x-")):
            filled[key] = value
        elif key in _NAMED_SCHEMAS and isinstance(value, dict):
            filled[key] = {name: fill_enums(item, depth + 1) for name, item in value.items()}
        elif key != "enum_from":
            filled[key] = fill_enums(value, depth + 1)
    if "enum_from" in schema:
        name = schema["enum_from"]
        source = ENUM_SOURCES.get(name) if isinstance(name, str) else None
        if source is None:
            raise ValueError(f"enum_from {name!r}: use one of {', '.join(ENUM_SOURCES)}")
        filled["enum"] = list(source())
    return filled


def load_catalogue(path: Path, known_roles: frozenset[str] = BUILT_IN_ROLES) -> Catalogue:
    """Read a ``.yaml``/``.yml``/``.json`` catalogue whose policy may name ``known_roles``;
    ``ValueError`` says what is wrong."""
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        catalogue = Catalogue.model_validate(data, context=policy_context(known_roles))
        for spec in catalogue.tools:
            spec.parameters = fill_enums(spec.parameters)
    except RecursionError as exc:
        raise ValueError(f"tool catalogue {path}: nested too deeply") from exc
    except (ValueError, yaml.YAMLError, ValidationError) as exc:
        raise ValueError(f"tool catalogue {path}: {exc}") from exc
    return catalogue


def build_tools(
    catalogue: Catalogue,
    base_urls: Mapping[str, str | None],
    client: httpx.AsyncClient,
    breakers: dict[str, CircuitBreaker],
    fallbacks: Mapping[str, Fallback],
    service_token: str | None = None,
) -> list[Tool]:
    """Tools for every entry. A tool whose backend is not configured and has no fallback is
    marked unavailable: not listed, and it answers 503 ``BACKEND_UNAVAILABLE``."""
    tools = []
    for spec in catalogue.tools:
        if (spec.backend is None) == (spec.url is None):
            raise ValueError(f"tool {spec.name!r}: give exactly one of 'backend' and 'url'")
        backend = spec.backend or spec.url or ""
        base_url = spec.url or base_urls.get(backend)
        fallback = None
        if spec.fallback is not None:
            if spec.fallback not in fallbacks:
                raise ValueError(f"tool {spec.name!r}: unknown fallback {spec.fallback!r}")
            fallback = fallbacks[spec.fallback]
        idempotent = bool((spec.annotations or {}).get("idempotentHint"))
        call = HttpCall(
            backend=backend,
            base_url=base_url,
            method=spec.method,
            path=spec.path,
            timeout_seconds=spec.timeout_seconds,
            retries=spec.retries if idempotent else 0,
            arguments=spec.arguments,
            result_field=spec.result_field,
            token=service_token if backend in CONCLAVE_SERVICES else None,
            sends_acting_user=backend in CONCLAVE_SERVICES,
        )
        breaker = breakers.setdefault(backend, CircuitBreaker())
        unavailable = None
        if base_url is None and fallback is None:
            unavailable = f"backend {backend!r} is not configured ({ENV_OF_BACKEND[backend]})"
        tools.append(
            Tool(
                name=spec.name,
                title=spec.title,
                description=spec.description,
                executor=http_executor(call, client, breaker, fallback=fallback),
                parameters=spec.parameters,
                output_schema=spec.output_schema,
                annotations=spec.annotations,
                tags=(*spec.tags, "backend"),
                # Room for every retry and its backoff inside the gateway's own time-out.
                timeout_seconds=spec.timeout_seconds * (call.retries + 1) + call.retries * 1.0,
                unavailable_reason=unavailable,
            )
        )
    return tools
