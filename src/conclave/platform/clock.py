"""Time helpers: every timestamp in Conclave is timezone-aware UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    """Serialise an aware datetime as RFC 3339 UTC with a ``Z`` suffix (microsecond precision)."""
    if moment.tzinfo is None:
        # SQLite hands naive datetimes back; they were stored as UTC.
        moment = moment.replace(tzinfo=UTC)
    elif moment.tzinfo is not UTC:  # most moments are utc_now()'s: no conversion needed
        moment = moment.astimezone(UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def as_utc(moment: datetime) -> datetime:
    """Attach UTC to a naive datetime read back from a store that drops the zone."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
