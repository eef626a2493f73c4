"""SQL of ownership: who owns each collection, claimed by the first requester that targets it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from conclave.collector.store.executor import Executor, all_rows, is_sqlite
from conclave.collector.store.tables import collection_owners


async def claim_collections(
    connection: AsyncConnection, names: Sequence[str], owner: str, now: datetime
) -> None:
    """Make ``owner`` the owner of those of ``names`` nobody owns yet (others are left alone:
    read the owners back with :func:`owners_of` to learn who won a concurrent claim)."""
    names = list(dict.fromkeys(names))
    if not names:
        return
    dialect = sqlite if is_sqlite(connection) else postgresql
    statement = (
        dialect.insert(collection_owners)
        .values([{"collection": name, "owner": owner, "created_at": now} for name in names])
        .on_conflict_do_nothing(index_elements=["collection"])
    )
    await connection.execute(statement)


async def owners_of(executor: Executor, names: Sequence[str]) -> dict[str, str]:
    """``collection -> owner`` of those of ``names`` that have one."""
    if not names:
        return {}
    rows = await all_rows(
        executor,
        select(collection_owners.c.collection, collection_owners.c.owner).where(
            collection_owners.c.collection.in_(list(names))
        ),
    )
    return {row.collection: row.owner for row in rows}


async def owned_by(executor: Executor, owner: str) -> list[str]:
    """The collections ``owner`` owns, by name."""
    rows = await all_rows(
        executor,
        select(collection_owners.c.collection)
        .where(collection_owners.c.owner == owner)
        .order_by(collection_owners.c.collection),
    )
    return [row.collection for row in rows]
