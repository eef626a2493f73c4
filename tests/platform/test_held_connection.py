"""A group committer's held connection: kept after a bad statement, replaced when it is lost."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.db.engine import HeldConnection

SAME_CONNECTION = (
    "DO $$ BEGIN IF current_setting('application_name') <> 'held-test' THEN "
    "RAISE EXCEPTION 'not the held connection'; END IF; END $$"
)


async def test_a_bad_statement_keeps_the_connection_a_lost_one_is_replaced(
    postgres_engine: AsyncEngine,
) -> None:
    held = HeldConnection(postgres_engine)
    try:
        await held.execute("SET application_name = 'held-test'", [])
        with pytest.raises(asyncpg.DivisionByZeroError):
            await held.execute("SELECT 1 / $1::int", [0])
        await held.execute(SAME_CONNECTION, [])  # still the same session

        async with postgres_engine.connect() as other:
            await other.execute(  # returns once the backend has gone (or after 5 s)
                text(
                    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                    "WHERE application_name = 'held-test'"
                )
            )
        with pytest.raises(Exception):  # noqa: B017 - whatever the driver says of a dead socket
            await held.execute("SELECT 1", [])
        await held.execute("SELECT 1", [])  # a fresh connection from the pool
        with pytest.raises(asyncpg.RaiseError, match="not the held connection"):
            await held.execute(SAME_CONNECTION, [])
    finally:
        await held.release()
