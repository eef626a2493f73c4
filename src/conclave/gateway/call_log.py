"""The gateway's transparency log of tool calls, ``calls``: one leaf per governed call, queued in
the transaction that writes the call's audit row (the log's integrator gives it its index), so
anyone holding the log's key can check that a call the gateway answered is recorded, and that no
recorded call was later removed or changed.

A leaf's entry is the call's audit facts in the versioned, canonical serialisation
``conclave.call/v1``: a JSON object with sorted keys, no white space, ASCII only (``\\uXXXX``
escapes), holding

    format             "conclave.call/v1"
    conclave_id        the call's id (its audit row's key)
    tool               the tool that ran (canonical name); requested_tool: the name asked for
    user_sha256        SHA-256 (hex) of the caller's user id
    created_at         RFC 3339, when the call was asked for; completed_at: when it ended
    status, orthodoxy_status, http_status, error_code   how it ended
    args_sha256        SHA-256 (hex) of the canonical JSON of the arguments as audited (redacted)
    result_sha256      SHA-256 (hex) of the canonical JSON of the result as audited, or null
    canonical_args_sha256, warnings_sha256   the same of those fields, or null
    error_message_sha256, correlation_id_sha256   SHA-256 (hex) of the text in UTF-8, or null
    duration_ms        how long the call took, as audited
    on_behalf_of_sha256   SHA-256 (hex) of the service that acted for the user: present only
                       for such a call (an entry without it is byte for byte what it was before
                       the key existed, so every earlier leaf still verifies)

Every field of the audit row the caller is shown is covered, so changing any of them in the store
is found (``GET /calls/{id}/verify``). Values are hashed as the store keeps them, through JSON
(mapping keys are strings there).

Values are hashed, never written out: argument or result values may be confidential. Whoever
holds the audit row (or the call's arguments and result) recomputes the hashes with
:func:`canonical_json`. A hash of a value with few possible values can be found by guessing, and
the user hash says whose call it is, so a leaf's data is served only to operators and to the
caller whose call it is (:func:`may_read_call`); its hash, in every receipt, reveals nothing
without the entry.
"""

from __future__ import annotations

from conclave.gateway.records import AuditRow
from conclave.platform.clock import rfc3339
from conclave.platform.jsontext import json_encoder
from conclave.platform.tlog import entries
from conclave.platform.tlog.entries import (
    canonical_json,
    json_sha256,
    optional_json_sha256,
    optional_text_sha256,
    text_sha256,
)

CALLS_LOG = "calls"
"""The name of the log (its origin is ``<CONCLAVE_TLOG_ORIGIN>/calls``)."""

CALL_FORMAT = "conclave.call/v1"
"""The version of the entry's serialisation."""


__all__ = ["CALLS_LOG", "CALL_FORMAT", "call_entry", "canonical_json", "receipt_path"]


def call_entry(row: AuditRow) -> bytes:
    """The leaf entry of a finished call (``conclave.call/v1``). ``ValueError`` (or
    ``RecursionError``) for a row holding a value JSON cannot carry, which the audit never
    stores."""
    # The keys are written in sorted order, so the encoder need not sort them (the text is
    # canonical_json's: tests/gateway/test_call_log.py); one entry is made per governed call.
    entry = {
        "args_sha256": json_sha256(row.args),
        "canonical_args_sha256": optional_json_sha256(row.canonical_args),
        "completed_at": rfc3339(row.completed_at) if row.completed_at else None,
        "conclave_id": row.conclave_id,
        "correlation_id_sha256": optional_text_sha256(row.correlation_id),
        "created_at": rfc3339(row.created_at),
        "duration_ms": row.duration_ms,
        "error_code": row.error_code,
        "error_message_sha256": optional_text_sha256(row.error_message),
        "format": CALL_FORMAT,
        "http_status": row.http_status,
        "orthodoxy_status": row.orthodoxy_status,
        "requested_tool": row.requested_tool,
        "result_sha256": optional_json_sha256(row.result),
        "status": row.status,
        "tool": row.tool_name,
        "user_sha256": text_sha256(row.user_id),
        "warnings_sha256": optional_json_sha256(row.warnings),
    }
    if row.on_behalf_of is not None:  # a service acting for the user: the key out of order
        entry["on_behalf_of_sha256"] = text_sha256(row.on_behalf_of)
        return canonical_json(entry)
    return _entry_text(entry).encode("ascii")


_entry_text = json_encoder(separators=(",", ":"), ensure_ascii=True, default=str)


may_read_call = entries.owner_reads("user_sha256")
"""Operators, and the caller whose call it is, read a leaf's data (its ``user_sha256`` is
theirs)."""


def receipt_path(hashed: bytes) -> str:
    """Where the receipt of the call whose leaf hash is ``hashed`` is served (relative to the
    gateway)."""
    return entries.receipt_path(CALLS_LOG, hashed)
