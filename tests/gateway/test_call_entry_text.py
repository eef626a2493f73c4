"""A call's entry is written in exactly one spelling, ``canonical_json``'s: it is rebuilt from the
stored row to be checked against the log, so the text the chain writes (keys already in order, no
sorting) must be the canonical text for any row."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from conclave.gateway.call_log import call_entry, canonical_json
from conclave.gateway.records import AuditRow

_text = st.text(max_size=12)
_json: Any = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)
_moment = st.datetimes(min_value=datetime(1970, 1, 2), timezones=st.just(UTC))


@settings(max_examples=400, deadline=None)
@given(
    texts=st.lists(_text, min_size=6, max_size=6),
    optional=st.lists(st.none() | _text, min_size=3, max_size=3),
    values=st.lists(_json, min_size=4, max_size=4),
    created=_moment,
    completed=st.none() | _moment,
    http_status=st.none() | st.integers(100, 599),
    duration=st.none() | st.floats(allow_nan=False) | st.integers(0, 10**6),
)
def test_the_entry_is_the_canonical_text_of_its_facts(
    texts: list[str],
    optional: list[str | None],
    values: list[Any],
    created: datetime,
    completed: datetime | None,
    http_status: int | None,
    duration: float | None,
) -> None:
    conclave_id, tool, requested, user, status, orthodoxy = texts
    correlation, error_code, error_message = optional
    args, result, canonical_args, warnings = values
    row = AuditRow(
        conclave_id=conclave_id,
        tool_name=tool,
        requested_tool=requested,
        args=args,
        user_id=user,
        correlation_id=correlation,
        idempotency_key=None,
        request_hash=None,
        created_at=created,
        canonical_args=canonical_args,
        status=status,
        orthodoxy_status=orthodoxy,
        http_status=http_status,
        result=result,
        warnings=warnings,
        error_code=error_code,
        error_message=error_message,
        duration_ms=duration,
        completed_at=completed,
    )

    entry = call_entry(row)

    assert entry == canonical_json(json.loads(entry))
    facts = json.loads(entry)
    assert list(facts) == sorted(facts)
    assert facts["conclave_id"] == conclave_id and facts["duration_ms"] == duration
