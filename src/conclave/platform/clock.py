"""Time helpers: every timestamp in Conclave is timezone-aware UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    """Serialise an aware datetime as RFC 3339 UTC with a ``Z`` suffix (microsecond precision)."""
    # A naive datetime (SQLite hands them back) was stored as UTC: its fields are UTC's already.
    if moment.tzinfo is not None and moment.tzinfo is not UTC:  # most are utc_now()'s
        moment = moment.astimezone(UTC)
    # The text of isoformat(timespec="microseconds") with "Z" for "+00:00", formatted directly:
    # half the cost (an f-string with the same widths costs more than isoformat), and a governed
    # call writes three timestamps.
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ" % (  # noqa: UP031
        moment.year,
        moment.month,
        moment.day,
        moment.hour,
        moment.minute,
        moment.second,
        moment.microsecond,
    )


def as_utc(moment: datetime) -> datetime:
    """Attach UTC to a naive datetime read back from a store that drops the zone."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
