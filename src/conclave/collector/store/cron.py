"""SQL of cron schedules."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from conclave.collector.records import ScheduleRecord
from conclave.collector.store.executor import all_rows
from conclave.collector.store.tables import schedules


async def insert_schedule(engine: AsyncEngine, schedule: ScheduleRecord) -> None:
    """Store a new schedule (``IntegrityError`` when the name is taken)."""
    async with engine.begin() as connection:
        await connection.execute(schedules.insert().values(**schedule.values()))


async def list_schedules(
    engine: AsyncEngine, created_by: str | None = None
) -> list[ScheduleRecord]:
    """Schedules by name: every one, or those of ``created_by``."""
    statement = select(schedules).order_by(schedules.c.name)
    if created_by is not None:
        statement = statement.where(schedules.c.created_by == created_by)
    return [ScheduleRecord.from_row(row) for row in await all_rows(engine, statement)]


async def delete_schedule(
    engine: AsyncEngine, name_or_id: str, created_by: str | None = None
) -> bool:
    """Remove a schedule by name or id (only one of ``created_by``'s when given)."""
    statement = schedules.delete().where(
        or_(schedules.c.name == name_or_id, schedules.c.schedule_id == name_or_id)
    )
    if created_by is not None:
        statement = statement.where(schedules.c.created_by == created_by)
    async with engine.begin() as connection:
        result = await connection.execute(statement)
    return bool(result.rowcount)


def _named(name_or_id: str, created_by: str | None) -> ColumnElement[bool]:
    match = or_(schedules.c.name == name_or_id, schedules.c.schedule_id == name_or_id)
    return match if created_by is None else and_(match, schedules.c.created_by == created_by)


async def get_schedule(
    engine: AsyncEngine, name_or_id: str, created_by: str | None = None
) -> ScheduleRecord | None:
    """A schedule by name or id (only one of ``created_by``'s when given)."""
    rows = await all_rows(engine, select(schedules).where(_named(name_or_id, created_by)))
    return ScheduleRecord.from_row(rows[0]) if rows else None


async def set_schedule_enabled(
    engine: AsyncEngine,
    name_or_id: str,
    enabled: bool,
    next_fire_at: datetime | None,
    created_by: str | None = None,
) -> ScheduleRecord | None:
    """Pause or resume a schedule by name or id (only one of ``created_by``'s when given), moving
    its next tick to ``next_fire_at`` when given; the schedule as stored, or ``None``."""
    match = _named(name_or_id, created_by)
    values: dict[str, object] = {"enabled": enabled}
    if next_fire_at is not None:
        values["next_fire_at"] = next_fire_at
    async with engine.begin() as connection:
        result = await connection.execute(update(schedules).where(match).values(**values))
        if not result.rowcount:
            return None
        row = (await connection.execute(select(schedules).where(match))).first()
    return ScheduleRecord.from_row(row) if row is not None else None


async def due_schedules(engine: AsyncEngine, now: datetime) -> list[ScheduleRecord]:
    """Enabled schedules whose next tick has come."""
    rows = await all_rows(
        engine,
        select(schedules).where(schedules.c.enabled.is_(True), schedules.c.next_fire_at <= now),
    )
    return [ScheduleRecord.from_row(row) for row in rows]


async def advance_schedule(
    connection: AsyncConnection,
    schedule_id: str,
    due: datetime,
    next_fire_at: datetime,
    expedition_id: str,
) -> bool:
    """Compare-and-set the schedule past tick ``due``: only one replica's update matches, and
    only that replica creates the tick's expedition (in the same transaction). A schedule paused
    since it was found due matches no more: a pause takes effect at once."""
    result = await connection.execute(
        update(schedules)
        .where(
            schedules.c.schedule_id == schedule_id,
            schedules.c.next_fire_at == due,
            schedules.c.enabled.is_(True),
        )
        .values(next_fire_at=next_fire_at, last_fired_at=due, last_expedition_id=expedition_id)
    )
    return bool(result.rowcount)
