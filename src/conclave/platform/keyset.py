"""Keyset pagination, newest first: the opaque cursor of a listing ordered by ``(created_at,
key)`` descending, and the condition that continues after it.

A cursor is the last row's creation time and key, base64url-encoded: it positions a listing, it
grants nothing (the listing's own filters, the caller's scope among them, still apply), so it is
not signed. It is read strictly: whatever a client sends in its place is 400 ``INVALID_CURSOR``,
never a value the store would choke on (a NUL, a time without a zone, an unbounded key).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator
from sqlalchemy import Select, and_, or_
from sqlalchemy.sql.elements import ColumnElement

from conclave.platform.clock import as_utc, rfc3339
from conclave.platform.errors import BadRequest
from conclave.platform.problem_types import ProblemCode


def _in_utc(moment: datetime) -> datetime:
    try:
        return as_utc(moment)
    except OverflowError:  # 9999-12-31T23:00-14:00 is after the last UTC moment
        raise ValueError("the time is outside the years 1 to 9999 in UTC") from None


UtcMoment = Annotated[datetime, AfterValidator(_in_utc)]
"""A listing's time filter (``since``, ``until``): RFC 3339, read in UTC (a time without a zone
is UTC); a time that has no UTC moment is 422, not an overflow deep in the store."""

RowT = TypeVar("RowT")

CURSOR_MAX_LENGTH = 400
"""The longest cursor a listing accepts (its key at most 256 characters)."""

_KEY_MAX_LENGTH = 256


def encode_cursor(created_at: datetime, key: str) -> str:
    """The cursor of the page after the row created at ``created_at`` with key ``key``."""
    raw = f"{rfc3339(created_at)}|{key}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The ``(created_at, key)`` a cursor of :func:`encode_cursor` holds; 400
    ``INVALID_CURSOR`` for anything else."""
    try:
        if len(cursor) > CURSOR_MAX_LENGTH or not cursor.isascii():
            raise ValueError("not a cursor")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment_text, key = raw.split("|", 1)
        moment = datetime.fromisoformat(moment_text.replace("Z", "+00:00"))
        if moment.tzinfo is None or not 0 < len(key) <= _KEY_MAX_LENGTH or not key.isprintable():
            raise ValueError("not a cursor")
        return moment.astimezone(UTC), key
    except (ValueError, OverflowError, UnicodeDecodeError, binascii.Error) as exc:
        # OverflowError: a time with no UTC moment (0001-01-01T00:00+14:00).
        raise BadRequest(
            "cursor must come from next_cursor.", code=ProblemCode.INVALID_CURSOR
        ) from exc


def page_of(
    rows: Sequence[RowT], limit: int, position: Callable[[RowT], tuple[datetime, str]]
) -> tuple[list[RowT], str | None]:
    """The page of a listing read with ``limit + 1`` rows: its first ``limit`` rows, and the cursor
    after the last of them when there is more (None on the last page, even a full one)."""
    if len(rows) <= limit:
        return list(rows), None
    kept = list(rows[:limit])
    return kept, encode_cursor(*position(kept[-1]))


def after(
    created_at: ColumnElement[Any], key: ColumnElement[Any], position: tuple[datetime, str]
) -> ColumnElement[bool]:
    """Rows after ``position`` in ``(created_at, key)`` descending order."""
    moment, last_key = position
    return or_(created_at < moment, and_(created_at == moment, key < last_key))


def newest_first(
    statement: Select[Any],
    created_at: ColumnElement[Any],
    key: ColumnElement[Any],
    *,
    equal: Iterable[tuple[ColumnElement[Any], Any]] = (),
    since: datetime | None = None,
    until: datetime | None = None,
    position: tuple[datetime, str] | None = None,
    limit: int,
) -> Select[Any]:
    """A listing's page: ``statement`` narrowed to the rows whose ``equal`` columns hold the
    given values (a value of ``None`` keeps every row), created in ``[since, until)`` and after
    ``position`` (a decoded cursor), newest first, at most ``limit`` rows.

    Each filter is an equality on an indexed ``(column, created_at)`` pair, so the store walks
    one index from the newest row (or from the cursor) and stops after ``limit`` rows."""
    for column, value in equal:
        if value is not None:
            statement = statement.where(column == value)
    if since is not None:
        statement = statement.where(created_at >= since)
    if until is not None:
        statement = statement.where(created_at < until)
    if position is not None:
        # The plain bound lets the store start the walk at the cursor; the condition alone (an
        # OR) would be checked on every newer row, making a deep page cost every page before it.
        statement = statement.where(created_at <= position[0], after(created_at, key, position))
    return statement.order_by(created_at.desc(), key.desc()).limit(limit)
