"""Finance-mode routes under ``/v1/finance`` (only mounted when ``MCP_DOMAIN=finance``)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from conclave.gateway.api import Service
from conclave.gateway.finance import DEFAULT_DAYS, ENTITY_PREFIX, FINANCE_ALIASES, RISK_OF_PROFILE
from conclave.gateway.formats import render
from conclave.gateway.models import ToolCatalogue
from conclave.gateway.policy import listable, subject_of
from conclave.platform.http import CurrentPrincipal
from conclave.platform.openapi import problem_responses

finance_router = APIRouter(prefix="/v1/finance", tags=["finance"])


ARGUMENT_MAPPINGS = {
    "screen_tickers": {
        "tickers": f"universe ({ENTITY_PREFIX}<SYMBOL>)",
        "profile": "criteria.risk",
        "min_market_cap": "criteria.market_cap_min",
        "max_pe": "criteria.pe_max",
        "sectors": "criteria.sectors",
        "limit": "limit",
    },
    "compare_tickers": {"tickers": f"entity_ids ({ENTITY_PREFIX}<SYMBOL>)", "metrics": "metrics"},
    "query_sentiment": {
        "tickers": f"entity_ids ({ENTITY_PREFIX}<SYMBOL>)",
        "days": "since = now - days, until = now",
        "(fixed)": "signal_types = ['sentiment']",
        "limit": "limit",
    },
}


class NormalizeRequest(BaseModel):
    """An alias call to rewrite without executing it."""

    tool: str = Field(..., min_length=1, max_length=128)
    args: dict[str, Any] = Field(default_factory=dict)


class NormalizeResponse(BaseModel):
    """What the alias call would run."""

    requested_tool: str
    canonical_tool: str
    arguments: dict[str, Any]


@finance_router.get("/config")
async def finance_config(service: Service, principal: CurrentPrincipal) -> dict[str, Any]:
    """The aliases you may list, their canonical tools and argument mappings, and defaults."""
    views = [entry.view for entry in service.registry.aliases()]
    shown = {
        view.name
        for view in listable(service.policy, service.registry, subject_of(principal), views)
    }
    return {
        "domain": "finance",
        "aliases": {
            alias.name: alias.canonical for alias in FINANCE_ALIASES if alias.name in shown
        },
        "mappings": {name: mapping for name, mapping in ARGUMENT_MAPPINGS.items() if name in shown},
        "defaults": {"days": DEFAULT_DAYS, "risk_of_profile": RISK_OF_PROFILE},
        "entity_prefix": ENTITY_PREFIX,
    }


@finance_router.get("/tools")
async def finance_tools(
    service: Service,
    principal: CurrentPrincipal,
    format: Literal["openai", "anthropic", "mcp"] = "openai",
) -> ToolCatalogue:
    """The finance alias tools you may list, in function-calling format."""
    views = [entry.view for entry in service.registry.aliases()]
    shown = listable(service.policy, service.registry, subject_of(principal), views)
    entries = [render(view, format) for view in shown]
    return ToolCatalogue(tools=entries, count=len(entries), format=format)


@finance_router.post(
    "/normalize",
    responses=problem_responses(
        404, s404="No alias tool has this name, or none you may see (UNKNOWN_ALIAS)"
    ),
)
async def normalize(
    body: NormalizeRequest, service: Service, principal: CurrentPrincipal
) -> NormalizeResponse:
    """Show the canonical tool and rewritten arguments of an alias call, without executing."""
    canonical, arguments = service.normalize(
        body.tool, body.args, principal.user_id, principal.roles
    )
    return NormalizeResponse(
        requested_tool=body.tool, canonical_tool=canonical, arguments=arguments
    )
