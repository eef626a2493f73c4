"""SQL on ``consumed_events``: the event ids each consumer group has handled.

A consumer marks an event in the transaction of the work the event asked for, so the business row
and the mark commit (or roll back) together: a redelivered event (the bus delivers at least once)
finds its mark and does nothing, and an event whose work failed left no mark and is done again.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from conclave.platform.clock import utc_now
from conclave.platform.db.schema import consumed_events


async def mark_consumed(
    connection: AsyncConnection, group: str, event_id: str, *, at: datetime | None = None
) -> bool:
    """Record that consumer group ``group`` handled ``event_id``: ``True`` the first time,
    ``False`` when the group already did (a redelivery: do nothing).

    Call it on the connection of the handler's transaction, before the work. An event id is
    unique only within its channel, so a group that reads several channels passes a group per
    channel (:func:`conclave.platform.listener.dedupe_group`). ``at`` is the time recorded
    (now by default).
    """
    dialect = sqlite if connection.dialect.name == "sqlite" else postgresql
    statement = (
        dialect.insert(consumed_events)
        .values(consumer_group=group, event_id=event_id, consumed_at=at or utc_now())
        .on_conflict_do_nothing(index_elements=["consumer_group", "event_id"])
    )
    result = await connection.execute(statement)
    # A concurrent delivery of the same event waits on the key until the first commits, then
    # inserts nothing: exactly one of them sees a row inserted.
    return result.rowcount == 1
