"""Plug-in tools whose names OpenAI and Anthropic refuse as they are (a dot, more than 64
characters), loaded by the interop tests through ``GATEWAY_TOOL_MODULES``: the gateway must list
them under aliases the providers accept, and run them under those aliases."""

from __future__ import annotations

from typing import Any

from conclave.gateway.tools import Tool

_TEXT = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 1000}},
    "required": ["text"],
    "additionalProperties": False,
}


async def _echo(args: dict[str, Any], _ctx: Any) -> dict[str, Any]:
    return {"text": args["text"]}


DOTTED = "billing.invoices.search"
LONG = "warehouse_inventory_reconciliation_for_every_regional_distribution_centre"

TOOLS = [
    Tool(name=name, description=description, executor=_echo, parameters=_TEXT)
    for name, description in (
        (DOTTED, "Search invoices (a dotted name)."),
        (LONG, "Reconcile inventory (a long name)."),
        # Two names that differ only where the alias replaces characters: the aliases differ.
        ("billing.refunds", "Refunds."),
        ("billing_refunds", "Refunds, too."),
    )
]
