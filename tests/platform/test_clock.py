"""Timestamps leave Conclave as RFC 3339 UTC with a ``Z``, whatever zone they were made in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from conclave.platform.clock import rfc3339


def test_every_zone_is_written_as_utc_with_z() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert rfc3339(moment) == "2026-01-02T03:04:05.000006Z"
    assert rfc3339(moment.astimezone(timezone(timedelta(hours=2)))) == rfc3339(moment)
    assert rfc3339(moment.replace(tzinfo=timezone.utc)) == rfc3339(moment)  # noqa: UP017
    # A naive datetime (SQLite reads them back so) was stored as UTC.
    assert rfc3339(moment.replace(tzinfo=None)) == rfc3339(moment)


def test_the_text_is_isoformats_with_z_for_every_field_width() -> None:
    """Stored log entries hold these texts: they must keep isoformat's spelling exactly."""
    moments = [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2026, 11, 27, 9, 5, 7, 0, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 10, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 30, tzinfo=timezone(timedelta(hours=-7, minutes=-30))),
    ]
    for moment in moments:
        expected = moment.astimezone(UTC).isoformat(timespec="microseconds")
        assert rfc3339(moment) == expected.replace("+00:00", "Z")
