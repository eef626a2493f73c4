"""``/dead-letters``: what the pipeline set aside, for operators to look at, replay or discard.

Two kinds, on every service with a store and a bus:

- **outbox** events the bus refused (quarantined rows of this service's store,
  :mod:`conclave.platform.outbox_store`; ``conclave outbox`` does the same from a shell);
- **bus** entries a channel's consumers gave up on (``<channel>.dlq`` streams,
  :mod:`conclave.platform.bus.dead_letters`).

Only operators may see them (a payload may be any user's data) or act on them. Every replay and
discard is logged and published as an ``ops.dead_letters`` event through the outbox: who did what
to which entry. Listings are bounded: at most ``limit`` of each kind, payloads cut at
:data:`SHOWN_PAYLOAD_CHARS`.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request

from conclave.platform.bus.base import Event
from conclave.platform.bus.dead_letters import CHANNEL, ENTRY_ID, DeadLetter
from conclave.platform.bus.entry import PublishRefused
from conclave.platform.clock import rfc3339
from conclave.platform.errors import Conflict, Forbidden, NotFound
from conclave.platform.http import CurrentPlatform, CurrentPrincipal
from conclave.platform.jsontext import COMPACT
from conclave.platform.openapi import problem_responses
from conclave.platform.outbox import add_event
from conclave.platform.outbox_store import QuarantinedEvent, discard, list_quarantined, replay
from conclave.platform.problem_types import ProblemCode
from conclave.platform.runtime import Platform

log = logging.getLogger(__name__)

AUDIT_CHANNEL = "ops.dead_letters"
SHOWN_PAYLOAD_CHARS = 4096
SHOWN_FIELD_CHARS = 256
MAX_CHANNELS = 50
MAX_LISTED_ENTRIES = 500
"""Most bus entries one listing carries, over all channels (each at most ~5 KB)."""

router = APIRouter(tags=["dead letters"])

Action = Literal["replay", "discard"]
EventId = Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]
ChannelName = Annotated[str, Path(max_length=200, pattern=rf"^{CHANNEL.pattern}$")]
EntryId = Annotated[str, Path(max_length=41, pattern=rf"^{ENTRY_ID.pattern}$")]


def _operator_only(request: Request, principal: Any) -> None:
    if principal.is_operator or not request.app.state.authenticator.enabled:
        return
    raise Forbidden("Only operators may see or resolve dead letters.")


def _preview(payload: Any) -> tuple[str, bool]:
    text = payload if isinstance(payload, str) else COMPACT.encode(payload)
    return text[:SHOWN_PAYLOAD_CHARS], len(text) > SHOWN_PAYLOAD_CHARS


def _outbox_row(event: QuarantinedEvent) -> dict[str, Any]:
    payload, cut = _preview(event.payload)
    return {
        "event_id": event.event_id,
        "channel": event.channel,
        "source": event.source,
        "attempts": event.attempts,
        "last_error": _short(event.last_error),
        "created_at": rfc3339(event.created_at),
        "quarantined_at": rfc3339(event.quarantined_at),
        "payload": payload,
        "payload_cut": cut,
    }


def _bus_entry(letter: DeadLetter) -> dict[str, Any]:
    payload, cut = _preview(letter.fields.get("payload", ""))
    return {
        "channel": letter.channel,
        "entry_id": letter.entry_id,
        "event_id": _short(letter.fields.get("event_id")),
        "source": _short(letter.fields.get("source")),
        "reason": _short(letter.reason),
        "group": _short(letter.group),
        "payload": payload,
        "payload_cut": cut or letter.cut,
        # A letter cut for the listing is not parsed here (it may be megabytes): whether it
        # replays is found when it is replayed (409 if it is no event).
        "replayable": None if letter.cut else letter.malformed() is None,
    }


def _short(value: str | None) -> str | None:
    return None if value is None else value[:SHOWN_FIELD_CHARS]


@router.get("/dead-letters", responses=problem_responses(403, 503))
async def list_dead_letters(
    request: Request,
    platform: CurrentPlatform,
    principal: CurrentPrincipal,
    limit: Annotated[int, Query(ge=1, le=100, description="Most entries of each kind.")] = 50,
) -> dict[str, Any]:
    """Quarantined outbox events of this service's store and dead-lettered bus entries (operators
    only), oldest first; each payload cut at 4,096 characters and every other field at 256, at
    most 500 bus entries in all (`truncated` says when more were left out)."""
    _operator_only(request, principal)
    outbox = [_outbox_row(event) for event in await list_quarantined(platform.engine, limit)]
    bus = []
    room = MAX_LISTED_ENTRIES
    channels = await platform.bus.dead_letter_channels(MAX_CHANNELS)
    for channel in channels:
        if room <= 0:
            break
        letters = await platform.bus.dead_letters(channel, min(limit, room))
        room -= len(letters)
        if letters:
            bus.append({"channel": channel, "entries": [_bus_entry(item) for item in letters]})
    return {
        "service": request.app.state.service,
        "outbox": outbox,
        "bus": bus,
        "truncated": room <= 0,
    }


@router.post("/dead-letters/outbox/{event_id}/{action}", responses=problem_responses(403, 404, 503))
async def resolve_outbox_event(
    request: Request,
    platform: CurrentPlatform,
    principal: CurrentPrincipal,
    event_id: EventId,
    action: Action,
) -> dict[str, Any]:
    """Replay a quarantined outbox event (due again now, attempts reset) or discard it."""
    _operator_only(request, principal)
    resolve = replay if action == "replay" else discard
    done = await resolve(platform.engine, [event_id])
    if not done:
        raise NotFound("No quarantined outbox event has this id.", code=ProblemCode.NOT_FOUND)
    await _audit(request, platform, principal.user_id, action, "outbox", event_id, None)
    if action == "replay":
        platform.relay.wake()
    return {"kind": "outbox", "event_id": event_id, "action": action, "done": True}


@router.post(
    "/dead-letters/bus/{channel}/{entry_id}/{action}",
    responses=problem_responses(403, 404, 409, 503),
)
async def resolve_bus_entry(
    request: Request,
    platform: CurrentPlatform,
    principal: CurrentPrincipal,
    channel: ChannelName,
    entry_id: EntryId,
    action: Action,
) -> dict[str, Any]:
    """Replay a dead-lettered bus entry (published again on its channel, then removed) or
    discard it. An entry that is not an event (the reason it was dead-lettered) can only be
    discarded: replaying it is 409."""
    _operator_only(request, principal)
    letter = await _find(platform, channel, entry_id)
    if action == "replay":
        why = letter.malformed()
        if why is not None:
            raise Conflict(f"This entry is not an event ({why}); it can only be discarded.")
        try:
            await platform.bus.publish([letter.event()])
        except PublishRefused as exc:
            raise Conflict(f"The bus refused the event again: {exc}") from exc
    # Published first, removed after: a failure in between leaves the entry to replay again
    # (consumers dedupe by event id), never an entry lost.
    await platform.bus.remove_dead_letter(channel, entry_id)
    await _audit(request, platform, principal.user_id, action, "bus", entry_id, channel)
    return {"kind": "bus", "channel": channel, "entry_id": entry_id, "action": action, "done": True}


async def _find(platform: Platform, channel: str, entry_id: str) -> DeadLetter:
    letter = await platform.bus.dead_letter(channel, entry_id)
    if letter is None:
        raise NotFound("No dead-lettered entry has this id on this channel.")
    return letter


async def _audit(
    request: Request,
    platform: Platform,
    user_id: str,
    action: str,
    kind: str,
    entry: str,
    channel: str | None,
) -> None:
    service = request.app.state.service
    payload = {"action": action, "kind": kind, "id": entry, "channel": channel, "by": user_id}
    log.info("dead letter resolved", extra={**payload, "service": service})
    async with platform.engine.begin() as connection:
        await add_event(connection, Event(channel=AUDIT_CHANNEL, payload=payload, source=service))
    platform.relay.wake()
