"""Read a stream entry as an :class:`Event`, whoever wrote it.

Conclave's own publishers write the whole envelope (``event_id``, ``channel``, ``source``,
``emitted_at``, ``correlation_id``, ``payload``). Producers outside Conclave (an orchestrator that
``XADD``s a request) need send only ``payload``; what they leave out comes from the entry itself
(docs/architecture.md, "Publishing from outside Conclave"):

* ``event_id`` — the stream entry id (``1718000000000-0``), the same on every redelivery (a
  given ``event_id`` of that form must be the entry's own);
* ``channel`` — the stream the entry was read from (its key without ``BUS_STREAM_PREFIX``; a
  dead letter keeps the channel it was meant for in its ``channel`` field);
* ``emitted_at`` — ``timestamp`` when given (ISO 8601, or epoch seconds or milliseconds), else the
  time in the entry id;
* ``source`` — ``emitter`` when given.

An entry that still cannot be an event (no payload, text no store can carry, a time that is no
time) raises :class:`MalformedEntry`; the consumer dead-letters it with the reason and goes on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime

from conclave.platform.bus.base import Event
from conclave.platform.inputs import find_unsafe

MAX_EVENT_ID_LENGTH = 36
"""Every table that records an event id holds 36 characters (a UUID, or a stream entry id)."""
MAX_CORRELATION_ID_LENGTH = 128
MAX_SOURCE_LENGTH = 256

# Epoch numbers at or above this are milliseconds: 1e11 seconds is the year 5138, while 1e11
# milliseconds is March 1973, before any producer of ours existed.
_MILLISECONDS_FROM = 1e11
_EPOCH = re.compile(r"[0-9]{1,20}(\.[0-9]{1,9})?")
_ENTRY_ID = re.compile(r"([0-9]{1,20})-[0-9]{1,20}")
_LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


class MalformedEntry(ValueError):
    """The stream entry cannot be read as an event; the message says why."""


def event_from_entry(fields: Mapping[str, str], *, entry_id: str, channel: str) -> Event:
    """The event of the entry ``entry_id`` read from ``channel``'s stream.

    Raises :class:`MalformedEntry` when the entry is not one: no ``payload``, a payload that is
    not a JSON object, a value no store or bus can carry (a lone surrogate, NUL, a non-finite
    number: anyone who can write to a stream can put one there, and it must be dead-lettered,
    never become a row that fails every later read), an envelope value longer than the columns
    that record it, or a time that is no time.
    """
    if "payload" not in fields:
        raise MalformedEntry("no payload field")
    try:
        payload = json.loads(fields["payload"])
    except RecursionError as exc:
        raise MalformedEntry("payload is nested too deeply") from exc
    except ValueError as exc:
        raise MalformedEntry(f"payload is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise MalformedEntry("payload is not a JSON object")
    envelope = {name: value for name, value in fields.items() if name != "payload"}
    finding = find_unsafe(payload, ("payload",)) or find_unsafe(envelope)
    if finding is not None:
        raise MalformedEntry(f"unsafe value at {finding.field}: {finding.kind}")
    event_id = _given(fields, "event_id") or entry_id
    if event_id != entry_id and _ENTRY_ID.fullmatch(event_id):
        # Entry ids are the default event ids and are easy to predict: a producer naming its event
        # after another entry could make that entry's event a "duplicate" and have it dropped.
        raise MalformedEntry("event_id has the form of a stream entry id but is not this entry's")
    correlation_id = _given(fields, "correlation_id")
    source = _given(fields, "source") or _given(fields, "emitter") or ""
    _check_length("event_id", event_id, MAX_EVENT_ID_LENGTH)
    _check_length("correlation_id", correlation_id, MAX_CORRELATION_ID_LENGTH)
    _check_length("source", source, MAX_SOURCE_LENGTH)
    return Event(
        channel=_given(fields, "channel") or channel,
        payload=payload,
        source=source,
        event_id=event_id,
        emitted_at=_emitted_at(fields, entry_id),
        correlation_id=correlation_id,
    )


def parse_time(text: str) -> datetime:
    """An aware UTC datetime from ISO 8601 / RFC 3339 text (a time without an offset is taken as
    UTC) or from epoch seconds or milliseconds (a non-negative decimal number; 1e11 and above
    are milliseconds). ``ValueError`` for anything else."""
    text = text.strip()
    if _EPOCH.fullmatch(text):
        seconds = float(text)
        if seconds >= _MILLISECONDS_FROM:
            seconds /= 1000
        if seconds > _LATEST:
            raise ValueError("epoch time after the year 9999")
        return datetime.fromtimestamp(seconds, UTC)
    try:
        moment = datetime.fromisoformat(text)
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError as exc:  # 0001-01-01T00:00+01:00 is before the first UTC moment
        raise ValueError("time out of range") from exc
    except ValueError as exc:  # its message repeats the text, which may be anything and long
        raise ValueError("neither ISO 8601 nor epoch seconds or milliseconds") from exc


def _emitted_at(fields: Mapping[str, str], entry_id: str) -> datetime:
    for name in ("emitted_at", "timestamp"):
        text = _given(fields, name)
        if text is not None:
            try:
                return parse_time(text)
            except ValueError as exc:
                raise MalformedEntry(f"{name} is no time: {exc}") from exc
    matched = _ENTRY_ID.fullmatch(entry_id)
    milliseconds = int(matched.group(1)) if matched else -1
    if not 0 <= milliseconds / 1000 <= _LATEST:
        raise MalformedEntry(f"entry id {entry_id!r} holds no time: send emitted_at")
    return datetime.fromtimestamp(milliseconds / 1000, UTC)


def _given(fields: Mapping[str, str], name: str) -> str | None:
    # An empty value is an absent one: Conclave itself writes correlation_id "" for "none".
    value = fields.get(name)
    return value or None


def _check_length(name: str, value: str | None, limit: int) -> None:
    if value is not None and len(value) > limit:
        raise MalformedEntry(f"{name} is longer than {limit} characters")
