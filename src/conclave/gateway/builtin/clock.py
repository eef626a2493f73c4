"""``current_time``: the current time in UTC or an IANA time zone."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from conclave.gateway.tools import Tool, ToolContext, ToolExecutionError
from conclave.platform.problem_types import ProblemCode


async def _current_time(args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    zone_name = args.get("timezone", "UTC")
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ToolExecutionError(
            f"unknown time zone {zone_name!r}", code=ProblemCode.UNKNOWN_TIMEZONE
        ) from exc
    now = datetime.now(UTC)
    local = now.astimezone(zone)
    return {
        "utc": now.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "local": local.isoformat(timespec="seconds"),
        "timezone": zone_name,
        "unix": int(now.timestamp()),
    }


CURRENT_TIME = Tool(
    name="current_time",
    title="Current time",
    description="Current date and time in UTC and in an optional IANA time zone (Europe/Rome).",
    executor=_current_time,
    parameters={
        "type": "object",
        "properties": {"timezone": {"type": "string", "maxLength": 64, "default": "UTC"}},
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "utc": {"type": "string"},
            "local": {"type": "string"},
            "timezone": {"type": "string"},
            "unix": {"type": "integer"},
        },
        "required": ["utc", "local", "timezone", "unix"],
    },
    annotations={"readOnlyHint": True, "idempotentHint": False, "openWorldHint": False},
    tags=("builtin", "time"),
    timeout_seconds=5,
)
