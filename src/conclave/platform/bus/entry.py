"""An event as the bytes of a stream entry, and the refusals of entries that cannot be one.

Both buses encode through :func:`encode_entry`, so the in-process bus refuses exactly the events
Redis would (embedded mode fails like production) and the Redis bus packs the bytes it checked
(the check costs nothing beyond the encoding the publish does anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from conclave.platform.bus.base import Event

DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024
"""Largest encoded entry a bus accepts: far below Redis's 512 MB bulk limit, so an oversized
event is refused as the event's own fault instead of closing the connection like an outage."""


@dataclass(frozen=True)
class Refusal:
    """One event the bus did not take, for a reason of its own (the bus itself is reachable).

    ``lasting``: the event can never be published as it is (it cannot be encoded, or it is too
    large); otherwise the bus refused it this time (say, its stream key holds another type) and a
    later attempt may succeed.
    """

    event_id: str
    error: str
    lasting: bool


class PublishRefused(Exception):
    """Some events of a publish were refused; every other event of it was published, in order."""

    def __init__(self, refusals: Sequence[Refusal]) -> None:
        super().__init__("; ".join(f"{r.event_id}: {r.error}" for r in refusals))
        self.refusals = list(refusals)


class EntryRefused(Exception):
    """The event cannot be encoded as a stream entry (always a lasting refusal)."""


def bulk(value: bytes) -> bytes:
    """``value`` as a Redis protocol bulk string (its length, then the bytes)."""
    return b"$%d\r\n%b\r\n" % (len(value), value)


_FIELD_NAMES: dict[str, bytes] = {}


def _field_name(name: str) -> bytes:
    # Every entry has the same six field names: pack each once.
    packed = _FIELD_NAMES.get(name)
    if packed is None:
        packed = _FIELD_NAMES[name] = bulk(name.encode())
    return packed


def encode_entry(event: Event, max_bytes: int) -> list[bytes]:
    """The entry's field names and values as bulk strings; :class:`EntryRefused` when a value is
    not encodable as UTF-8 (a lone surrogate), the payload is not JSON-serialisable, or the entry
    exceeds ``max_bytes``."""
    try:
        fields = event.to_fields()
        parts: list[bytes] = []
        size = 0
        for name, value in fields.items():
            encoded = value.encode()
            size += len(encoded)
            parts += (_field_name(name), bulk(encoded))
    except UnicodeEncodeError as exc:
        raise EntryRefused(f"not encodable as UTF-8: {exc.reason} at position {exc.start}") from exc
    except (TypeError, ValueError, RecursionError) as exc:
        raise EntryRefused(f"payload is not serialisable as JSON: {exc}") from exc
    if size > max_bytes:
        raise EntryRefused(f"entry of {size} bytes exceeds the bus's limit of {max_bytes}")
    return parts


def encode_entries(
    events: Sequence[Event], max_bytes: int
) -> tuple[list[tuple[Event, list[bytes]]], list[Refusal]]:
    """The events that can be stream entries, each with its encoded entry (in order), and a
    lasting :class:`Refusal` for each one that cannot (see :func:`encode_entry`)."""
    encoded: list[tuple[Event, list[bytes]]] = []
    refusals: list[Refusal] = []
    for event in events:
        try:
            encoded.append((event, encode_entry(event, max_bytes)))
        except EntryRefused as exc:
            refusals.append(Refusal(event.event_id, str(exc), lasting=True))
    return encoded, refusals
