"""``query_signals`` answered from the relational store when no signals backend is configured."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from conclave.gateway import store
from conclave.gateway.backends.http_tool import Fallback
from conclave.gateway.tools import ToolContext
from conclave.platform.clock import as_utc, rfc3339
from conclave.platform.db.engine import store_errors
from conclave.platform.runtime import Platform


def _moment(value: str | None) -> datetime | None:
    # The schema's date-time format already checked the text; fromisoformat reads RFC 3339.
    return as_utc(datetime.fromisoformat(value.replace("Z", "+00:00"))) if value else None


def signals_table_fallback(platform: Platform) -> Fallback:
    """A fallback executor reading the ``signals`` table of ``platform``'s store."""

    async def query(args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
        with store_errors():
            rows = await store.query_signals(
                platform.engine,
                entity_ids=args["entity_ids"],
                signal_types=args.get("signal_types"),
                since=_moment(args.get("since")),
                until=_moment(args.get("until")),
                limit=args.get("limit", 100),
            )
        found = [
            {
                "entity_id": row.entity_id,
                "signal_type": row.signal_type,
                "value": row.value,
                "observed_at": rfc3339(row.observed_at),
                "source": row.source,
                "attributes": row.attributes,
            }
            for row in rows
        ]
        return {"signals": found, "count": len(found), "source": "store"}

    return query
