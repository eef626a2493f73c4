"""What each MCP protocol revision may carry: answers are shaped for the negotiated version.

A client that negotiated an older revision validates answers against that revision's schema; a
strict one rejects (or worse, misreads) fields added later. The SDK's own per-version result sieve
reads every handshake-era revision with the 2025-11-25 schema, so the gateway drops what each
revision's ``schema.ts`` (modelcontextprotocol/specification, ``schema/<version>``) does not hold.
"""

from __future__ import annotations

from typing import Any

from mcp_types.version import KNOWN_PROTOCOL_VERSIONS, is_version_at_least

SUPPORTED_VERSIONS: tuple[str, ...] = KNOWN_PROTOCOL_VERSIONS
"""Every revision ``/mcp`` speaks: the handshake-era ones and the 2026-07-28 per-request one."""

# The first revision whose schema holds each field the gateway sends.
_TOOL_FIELDS_SINCE = {
    "annotations": "2025-03-26",
    "title": "2025-06-18",
    "outputSchema": "2025-06-18",
    "_meta": "2025-06-18",
    "icons": "2025-11-25",
    "execution": "2025-11-25",
}
_CALL_RESULT_FIELDS_SINCE = {"structuredContent": "2025-06-18"}


def _newer(fields_since: dict[str, str], version: str) -> frozenset[str]:
    return frozenset(
        name for name, since in fields_since.items() if not is_version_at_least(version, since)
    )


_TOOL_FIELDS_TOO_NEW = {v: _newer(_TOOL_FIELDS_SINCE, v) for v in KNOWN_PROTOCOL_VERSIONS}
_RESULT_FIELDS_TOO_NEW = {v: _newer(_CALL_RESULT_FIELDS_SINCE, v) for v in KNOWN_PROTOCOL_VERSIONS}


def tool_for_version(entry: dict[str, Any], version: str) -> dict[str, Any]:
    """A ``tools/list`` entry (wire field names) holding only what ``version`` defines. (An
    unknown version never gets this far: ``/mcp`` refuses it at the door.)"""
    too_new = _TOOL_FIELDS_TOO_NEW.get(version, frozenset())
    if not too_new:
        return entry
    return {name: value for name, value in entry.items() if name not in too_new}


def call_result_fields_too_new(version: str) -> frozenset[str]:
    """The ``tools/call`` result fields (wire names) ``version`` does not define."""
    return _RESULT_FIELDS_TOO_NEW.get(version, frozenset())
