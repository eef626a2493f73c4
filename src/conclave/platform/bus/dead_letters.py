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
CHANNEL = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


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
        """Why the entry cannot be replayed, or ``None``."""
        try:
            self.event()
        except MalformedEntry as exc:
            return str(exc)
        return None


def dead_letter_of(
    channel: str, entry_id: str, fields: Mapping[str, str], reason: str = "", group: str = ""
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
    )
