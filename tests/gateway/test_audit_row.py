"""The audit row's one shape: ``AuditRow``, the ``mcp_tool_calls`` table, the store's writes, the
call event and ``GET /calls/{conclave_id}`` stay in step.

This is the recipe "Change the audit row" of CONTRIBUTING.md followed once: a field added to
``AuditRow`` and missed in one of the places the recipe names fails one of these tests, which says
which place.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path

from conclave.gateway import store
from conclave.gateway.events import call_event
from conclave.gateway.models import ToolCall
from conclave.gateway.records import AuditRow
from conclave.gateway.store import mcp_tool_calls
from conclave.platform.clock import as_utc
from tests.conftest import Backend

FIELDS = {field.name for field in fields(AuditRow)}
# Columns GET /calls/{conclave_id} keeps back: how the call was answered and how it is replayed.
NOT_SHOWN_TO_THE_CALLER = {"http_status", "idempotency_key", "request_hash"}
# The event carries the spec's payload and the outcome; subscribers read the rest from the row.
IN_THE_EVENT = {
    "conclave_id": "conclave_id",
    "tool_name": "tool",
    "requested_tool": "requested_tool",
    "args": "args",
    "user_id": "user_id",
    "created_at": "timestamp",
    "status": "status",
    "orthodoxy_status": "orthodoxy_status",
    "error_code": "error_code",
    "correlation_id": None,  # the event's envelope, not its payload
    "upstream_credential": "upstream_credential",
    "on_behalf_of": "on_behalf_of",  # only when a service acted for the user
    "log_leaf_hash": None,  # the receipt is the caller's; subscribers read the row or the log
}


def _finished_row() -> AuditRow:
    """A finished call of an alias tool whose every field holds a value of its own."""
    return AuditRow(
        conclave_id="00000000-0000-4000-8000-0000000000a1",
        tool_name="echo",
        requested_tool="shout_echo",
        args={"text": "hi"},
        user_id="ada",
        correlation_id="corr-audit-row",
        idempotency_key="key-audit-row",
        request_hash="f" * 64,
        created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        canonical_args={"message": "hi"},
        on_behalf_of="svc-audit-row",
        status="succeeded",
        orthodoxy_status="purified",
        http_status=200,
        result={"message": "HI"},
        warnings=["removed 1 control character(s)"],
        error_code="NO_ERROR_CODE",
        error_message="no error message",
        duration_ms=1.25,
        completed_at=datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC),
        upstream_credential="service",
        log_leaf_hash=bytes(range(32)),
    )


def _values(row: AuditRow) -> dict[str, object]:
    return {name: getattr(row, name) for name in FIELDS}


def test_the_example_row_fills_every_field_with_a_value_of_its_own():
    values = [repr(value) for value in _values(_finished_row()).values()]
    assert len(set(values)) == len(FIELDS), "give the new field a value in _finished_row"


def test_every_field_is_a_column_of_the_audit_table():
    assert set(mcp_tool_calls.c.keys()) == FIELDS


def test_a_finished_call_writes_every_field():
    row = _finished_row()
    assert dict(store.record_call(row).values) == _values(row)


def test_a_running_call_and_its_completion_write_every_field():
    row = _finished_row()
    running = dict(store.record_running_call(row).values)
    completion = dict(store.finish_call(row).values)
    assert {**running, **completion} == _values(row)
    # What the row says before the tool runs is not rewritten when it finishes, and the other way
    # round: only the key and the statuses are in both.
    assert set(running) & set(completion) == {"conclave_id", "status", "orthodoxy_status"}


def test_the_event_is_built_from_the_row():
    row = _finished_row()
    event = call_event(row)
    assert set(IN_THE_EVENT) <= FIELDS
    for field, key in IN_THE_EVENT.items():
        if key is not None and key != "timestamp":
            assert event.payload[key] == getattr(row, field), field
    assert event.payload["timestamp"].startswith("2026-01-02T03:04:05")
    assert event.correlation_id == row.correlation_id
    assert len(event.payload) == sum(key is not None for key in IN_THE_EVENT.values())


def test_the_docs_name_every_column():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "gateway.md").read_text()
    section = docs.split("## Audit table `mcp_tool_calls`", 1)[1].split("\n## ", 1)[0]
    assert {name for name in FIELDS if f"`{name}`" not in section} == set()


def test_the_caller_sees_every_field_but_those_kept_back():
    # Plus the path of the call's receipt, made from its leaf hash.
    assert set(ToolCall.model_fields) == FIELDS - NOT_SHOWN_TO_THE_CALLER | {"receipt"}


async def test_a_stored_row_reads_back_as_it_was_written(backend: Backend):
    row = _finished_row()
    async with backend.engine.begin() as connection:
        await connection.execute(mcp_tool_calls.insert(), [dict(store.record_call(row).values)])
    stored = await store.get_call(backend.engine, row.conclave_id)
    assert stored is not None
    assert stored.completed_at is not None
    # SQLite hands back its time stamps without their zone.
    stored.created_at, stored.completed_at = as_utc(stored.created_at), as_utc(stored.completed_at)
    assert _values(stored) == _values(row)
