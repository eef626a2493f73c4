"""Finance mode (``MCP_DOMAIN=finance``): ticker-flavoured alias tools over the canonical entity tools.

| alias | canonical tool | argument rewriting |
|---|---|---|
| ``screen_tickers`` | ``screen_entities`` | ``tickers`` → ``universe`` (``ticker:<SYMBOL>``); ``profile`` → ``criteria.risk`` (conservative→low, balanced→medium, aggressive→high); ``min_market_cap`` → ``criteria.market_cap_min``; ``max_pe`` → ``criteria.pe_max``; ``sectors`` → ``criteria.sectors``; ``limit`` kept |
| ``compare_tickers`` | ``compare_entities`` | ``tickers`` → ``entity_ids``; ``metrics`` kept |
| ``query_sentiment`` | ``query_signals`` | ``tickers`` → ``entity_ids``; ``signal_types`` = ``["sentiment"]``; ``days`` (1-365, default 7) → ``since`` = now - days, ``until`` = now; ``limit`` kept |

Tickers are upper-cased and must match ``^[A-Z][A-Z0-9.-]{0,9}$``.
"""  # noqa: E501

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from conclave.platform.clock import rfc3339, utc_now

ENTITY_PREFIX = "ticker:"
_TICKER = re.compile(r"^[A-Z][A-Z0-9.-]{0,9}\Z")
RISK_OF_PROFILE = {"conservative": "low", "balanced": "medium", "aggressive": "high"}
# screen_tickers fields copied as they are into the canonical tool's criteria, under its names.
_CRITERION_OF_FIELD = {"min_market_cap": "market_cap_min", "max_pe": "pe_max", "sectors": "sectors"}
DEFAULT_DAYS = 7


class RewriteError(ValueError):
    """Alias arguments that cannot be mapped onto the canonical tool (422)."""


@dataclass(frozen=True)
class Alias:
    """An alias tool: its own schema, the canonical tool it calls, and the argument rewrite."""

    name: str
    canonical: str
    description: str
    parameters: dict[str, Any]
    rewrite: Callable[[dict[str, Any]], dict[str, Any]]


def entity_ids(tickers: list[str]) -> list[str]:
    """``["aapl"]`` → ``["ticker:AAPL"]``; a malformed ticker is a :class:`RewriteError`."""
    ids = []
    for ticker in tickers:
        symbol = ticker.strip().upper()
        if not _TICKER.match(symbol):
            raise RewriteError(f"{ticker!r} is not a ticker symbol")
        ids.append(ENTITY_PREFIX + symbol)
    return ids


def _screen(args: dict[str, Any]) -> dict[str, Any]:
    criteria: dict[str, Any] = {}
    if "profile" in args:
        criteria["risk"] = RISK_OF_PROFILE[args["profile"]]
    for alias_field, canonical_field in _CRITERION_OF_FIELD.items():
        if alias_field in args:
            criteria[canonical_field] = args[alias_field]
    rewritten: dict[str, Any] = {"criteria": criteria}
    if "tickers" in args:
        rewritten["universe"] = entity_ids(args["tickers"])
    if "limit" in args:
        rewritten["limit"] = args["limit"]
    return rewritten


def _compare(args: dict[str, Any]) -> dict[str, Any]:
    rewritten: dict[str, Any] = {"entity_ids": entity_ids(args["tickers"])}
    if "metrics" in args:
        rewritten["metrics"] = args["metrics"]
    return rewritten


def _sentiment(args: dict[str, Any]) -> dict[str, Any]:
    days = args.get("days", DEFAULT_DAYS)
    now = utc_now()
    rewritten: dict[str, Any] = {
        "entity_ids": entity_ids(args["tickers"]),
        "signal_types": ["sentiment"],
        "since": rfc3339(now - timedelta(days=days)),
        "until": rfc3339(now),
    }
    if "limit" in args:
        rewritten["limit"] = args["limit"]
    return rewritten


_TICKERS = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 10}}

FINANCE_ALIASES = (
    Alias(
        name="screen_tickers",
        canonical="screen_entities",
        description="Screen stock tickers by risk profile, market cap, P/E and sectors.",
        parameters={
            "type": "object",
            "properties": {
                "tickers": {**_TICKERS, "maxItems": 500},
                "profile": {"type": "string", "enum": sorted(RISK_OF_PROFILE)},
                "min_market_cap": {"type": "number", "minimum": 0},
                "max_pe": {"type": "number", "exclusiveMinimum": 0},
                "sectors": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
                "limit": {"type": "integer", "minimum": 1, "maximum": 500},
            },
            "additionalProperties": False,
        },
        rewrite=_screen,
    ),
    Alias(
        name="compare_tickers",
        canonical="compare_entities",
        description="Compare two or more stock tickers on a set of metrics.",
        parameters={
            "type": "object",
            "properties": {
                "tickers": {**_TICKERS, "minItems": 2, "maxItems": 20},
                "metrics": {"type": "array", "items": {"type": "string"}, "maxItems": 50},
            },
            "required": ["tickers"],
            "additionalProperties": False,
        },
        rewrite=_compare,
    ),
    Alias(
        name="query_sentiment",
        canonical="query_signals",
        description="Sentiment signals about stock tickers over the last N days, newest first.",
        parameters={
            "type": "object",
            "properties": {
                "tickers": {**_TICKERS, "minItems": 1, "maxItems": 100},
                "days": {"type": "integer", "minimum": 1, "maximum": 365, "default": DEFAULT_DAYS},
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
            },
            "required": ["tickers"],
            "additionalProperties": False,
        },
        rewrite=_sentiment,
    ),
)
