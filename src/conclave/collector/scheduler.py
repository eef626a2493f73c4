"""Cron schedules: stored in the relational store, each tick fired once across all replicas.

Every replica checks for due schedules; firing is a compare-and-set of ``next_fire_at`` from the
due tick to the following one, in the same transaction as the tick's expedition, so exactly one
replica wins each tick. A service that was down for several ticks fires once when it comes back,
then resumes at the next future tick (no burst of catch-up runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from datetime import datetime

from croniter import CroniterError, croniter
from sqlalchemy.exc import IntegrityError

from conclave.collector import store
from conclave.collector.events import optional_rfc3339
from conclave.collector.models import ExpeditionCreate, ScheduleCreate, ScheduleRead
from conclave.collector.parameter_secrets import check_parameters
from conclave.collector.service import ExpeditionService, owner_filter, written_collections
from conclave.collector.store import ScheduleRecord
from conclave.platform.auth import Principal
from conclave.platform.clock import as_utc, rfc3339, utc_now
from conclave.platform.credentials import redact
from conclave.platform.db.engine import is_store_down, store_errors
from conclave.platform.errors import Conflict, NotFound, Unprocessable
from conclave.platform.problem_types import ProblemCode

log = logging.getLogger(__name__)


def next_tick(cron: str, after: datetime) -> datetime:
    """The first tick of ``cron`` strictly after ``after`` (UTC)."""
    return as_utc(croniter(cron, as_utc(after)).get_next(datetime))


def _first_tick(cron: str, now: datetime) -> datetime:
    """The first tick of a schedule being created, or a 422 ``INVALID_CRON``: for text that is
    not a five-field cron, and for one naming no date that exists (``0 0 30 2 *``; croniter gives
    up after 50 years, which also bounds the search)."""
    if len(cron.split()) == 5 and croniter.is_valid(cron):
        try:
            return next_tick(cron, now)
        except CroniterError:
            message = "names no date that exists (such as 30 February)"
    else:
        message = "five-field cron expected"
    raise Unprocessable(
        f"cron {cron!r} is not a usable five-field cron expression: {message}.",
        code=ProblemCode.INVALID_CRON,
        errors=[{"field": "cron", "message": message, "type": "cron"}],
    )


def schedule_read(row: ScheduleRecord) -> ScheduleRead:
    """The API view of a schedule."""
    return ScheduleRead(
        schedule_id=row.schedule_id,
        name=row.name,
        cron=row.cron,
        expedition_type=row.expedition_type,
        priority=row.priority,
        target_collections=list(row.target_collections),
        parameters=redact(dict(row.parameters)),
        enabled=bool(row.enabled),
        next_fire_at=rfc3339(row.next_fire_at),
        last_fired_at=optional_rfc3339(row.last_fired_at),
        last_expedition_id=row.last_expedition_id,
        created_by=row.created_by,
        created_at=rfc3339(row.created_at),
    )


async def add_schedule(
    service: ExpeditionService, request: ScheduleCreate, principal: Principal
) -> ScheduleRead:
    """Store a schedule (422 for a bad cron or request, 409 for a taken name or a collection
    of another user); its expeditions run as ``principal``'s."""
    now = utc_now()
    first_tick = _first_tick(request.cron, now)
    service.registry.validate(request, service.settings)
    check_parameters(request.parameters, service.settings.source_secrets)
    created_by = principal.user_id
    with store_errors():
        async with service.platform.engine.begin() as connection:
            # The schedule's collections are reserved for its creator now, not at its first tick.
            await service.reserve_collections(
                connection,
                written_collections(request.expedition_type, request.collections()),
                created_by,
                principal,
            )
    row = ScheduleRecord(
        schedule_id=str(uuid.uuid4()),
        name=request.name,
        cron=request.cron,
        expedition_type=request.expedition_type,
        priority=request.priority,
        target_collections=request.collections(),
        parameters=request.parameters,
        enabled=request.enabled,
        next_fire_at=first_tick,
        last_fired_at=None,
        last_expedition_id=None,
        created_by=created_by,
        created_at=now,
    )
    try:
        with store_errors():
            await store.insert_schedule(service.platform.engine, row)
    except IntegrityError as exc:
        raise Conflict(
            f"A schedule named {request.name!r} exists.", code=ProblemCode.SCHEDULE_EXISTS
        ) from exc
    return schedule_read(row)


async def list_schedules(service: ExpeditionService, principal: Principal) -> list[ScheduleRead]:
    """The principal's schedules (every schedule for an operator)."""
    with store_errors():
        rows = await store.list_schedules(service.platform.engine, owner_filter(principal))
    return [schedule_read(row) for row in rows]


async def remove_schedule(
    service: ExpeditionService, name_or_id: str, principal: Principal
) -> None:
    """Delete a schedule (404 when unknown or another user's)."""
    with store_errors():
        removed = await store.delete_schedule(
            service.platform.engine, name_or_id, owner_filter(principal)
        )
    if not removed:
        raise NotFound(f"No schedule {name_or_id!r}.", code=ProblemCode.SCHEDULE_NOT_FOUND)


async def set_schedule_enabled(
    service: ExpeditionService, name_or_id: str, enabled: bool, principal: Principal
) -> ScheduleRead:
    """Pause or resume a schedule (404 when unknown or another user's). A resumed schedule
    fires at its next tick after now: the ticks it missed while paused are not made up."""
    engine = service.platform.engine
    owner = owner_filter(principal)
    following = None
    if enabled:
        with store_errors():
            found = await store.get_schedule(engine, name_or_id, owner)
        if found is not None:
            following = next_tick(found.cron, utc_now())
    with store_errors():
        row = await store.set_schedule_enabled(engine, name_or_id, enabled, following, owner)
    if row is None:
        raise NotFound(f"No schedule {name_or_id!r}.", code=ProblemCode.SCHEDULE_NOT_FOUND)
    return schedule_read(row)


class Scheduler:
    """Fires due schedules every ``poll_seconds``."""

    def __init__(self, service: ExpeditionService, poll_seconds: float) -> None:
        self._service = service
        self._poll = poll_seconds
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the loop."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="collector-scheduler")

    async def stop(self) -> None:
        """Stop the loop."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.fire_due()
            except Exception as exc:
                log.log(
                    logging.WARNING if is_store_down(exc) else logging.ERROR,
                    "schedule pass failed",
                    exc_info=not is_store_down(exc),
                )
            await asyncio.sleep(self._poll)

    async def fire_due(self) -> list[str]:
        """Fire every due schedule this replica wins; return the expeditions it queued."""
        service = self._service
        engine = service.platform.engine
        now = utc_now()
        fired = []
        for schedule in await store.due_schedules(engine, now):
            try:
                following = next_tick(schedule.cron, now)
            except (ValueError, TypeError):  # stored before its cron was checked
                log.error("schedule has no next tick", extra={"schedule": schedule.name})
                continue
            request = ExpeditionCreate(
                expedition_type=schedule.expedition_type,
                priority=schedule.priority,
                target_collections=list(schedule.target_collections),
                parameters=dict(schedule.parameters),
                correlation_id=f"schedule:{schedule.name}",
            )
            try:
                # The tick's expedition is its creator's: they see it, and it may write only
                # into the collections reserved for them when the schedule was added.
                requested_by = schedule.created_by or f"schedule:{schedule.name}"
                row = service.new_row(request, requested_by=requested_by)
            except Unprocessable as exc:  # e.g. its type's plug-in was uninstalled
                log.error("schedule cannot fire: %s", exc.detail, extra={"schedule": schedule.name})
                continue
            async with engine.begin() as connection:
                won = await store.advance_schedule(
                    connection,
                    schedule.schedule_id,
                    schedule.next_fire_at,
                    following,
                    row.expedition_id,
                )
                if won:
                    await service.reserve_collections(
                        connection,
                        written_collections(row.expedition_type, row.target_collections),
                        requested_by,
                        None,
                    )
                    await service.queue(connection, row)
            if won:
                fired.append(row.expedition_id)
        if fired:
            service.notify_submitted()
        return fired
