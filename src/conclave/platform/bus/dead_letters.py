"""Dead letters: entries a channel's consumers gave up on, as an operator sees and resolves them.

An entry reaches ``<channel>.dlq`` after too many deliveries, when its handler rejected it, or when
it could not be read as an event at all. An operator replays it (published again on its channel,
once whatever refused it is fixed) or discards it; both remove it from the dead letters.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass

from conclave.platform.bus.base import Event
from conclave.platform.bus.envelope import MalformedEntry, event_from_entry
from conclave.platform.ids import new_id

DLQ_FIELDS = ("dlq_reason", "dlq_group", "dlq_entry_id")
"""What the Redis bus adds to an entry it dead-letters (why, which group, the entry's id)."""

ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
CHANNEL = re.compile(r"[A-Za-z0-9_.-]{1,200}")
"""A channel name as the routes take it: no ``:``, which ends a deployment's stream prefix, so a
name can never reach into another deployment's streams sharing the Redis."""
MAX_ID_PART = 2**64 - 1
LISTED_FIELD_CHARS = 4096
"""A listing carries each field cut at this length (whole entries are read only to replay)."""


def is_entry_id(text: str) -> bool:
    """Whether ``text`` is a stream entry id Redis takes (two parts within 64 bits)."""
    if not ENTRY_ID.fullmatch(text):
        return False
    return all(int(part) <= MAX_ID_PART for part in text.split("-"))


@dataclass(frozen=True)
class DeadLetter:
    """One entry of ``channel``'s dead-letter stream."""

    channel: str
    """The channel the entry was meant for (its dead-letter stream is ``<channel>.dlq``)."""
    entry_id: str
    """Its id in the dead-letter stream (what replay and discard name)."""
    fields: Mapping[str, str]
    """The entry as it was written, without what dead-lettering added."""
    reason: str
    group: str
    original_entry_id: str
    cut: bool = False
    """A field was cut for the listing: this letter is for showing, not for replaying."""

    def event(self) -> Event:
        """The event to publish again on :attr:`channel`; :class:`MalformedEntry` when the entry
        is not one (it can only be discarded).

        The channel is always the dead-letter stream's own: an entry naming another channel in
        its fields is not sent there. An event id of the stream-entry form (a producer that sent
        none) is replaced by a fresh one, since on a new entry it would name another entry."""
        event = event_from_entry(self.fields, entry_id=self.original_entry_id, channel=self.channel)
        event_id = new_id() if ENTRY_ID.fullmatch(event.event_id) else event.event_id
        return dataclasses.replace(event, channel=self.channel, event_id=event_id)

    def malformed(self) -> str | None:
        """Why the entry cannot be replayed, or ``None`` (also ``None`` for a letter cut for a
        listing: whether it replays is known when it is read whole)."""
        if self.cut:
            return None
        try:
            self.event()
        except MalformedEntry as exc:
            return str(exc)
        return None


def dead_letter_of(
    channel: str,
    entry_id: str,
    fields: Mapping[str, str],
    reason: str = "",
    group: str = "",
    cut: bool = False,
) -> DeadLetter:
    """A dead letter from a dead-letter stream's entry (the bus's ``dlq_*`` fields read off)."""
    kept = {name: value for name, value in fields.items() if name not in DLQ_FIELDS}
    return DeadLetter(
        channel=channel,
        entry_id=entry_id,
        fields=kept,
        reason=fields.get("dlq_reason", reason),
        group=fields.get("dlq_group", group),
        original_entry_id=fields.get("dlq_entry_id", entry_id),
        cut=cut,
    )


def cut_fields(fields: Mapping[str, str], limit: int) -> tuple[dict[str, str], bool]:
    """``fields`` with every name and value cut at ``limit`` characters; whether any was cut."""
    kept = {name[:limit]: value[:limit] for name, value in list(fields.items())[:64]}
    cut = len(fields) > 64 or any(
        len(name) > limit or len(value) > limit for name, value in fields.items()
    )
    return kept, cut
