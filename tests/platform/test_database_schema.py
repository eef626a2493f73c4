"""``CONCLAVE_DATABASE_SCHEMA`` puts a process's tables in a PostgreSQL schema of its own."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError
from sqlalchemy import text

from conclave.platform.db.engine import create_engine
from conclave.platform.runtime import Platform
from conclave.settings import CommonSettings
from tests.conftest import POSTGRES_URL, missing_service


async def test_platform_migrates_and_works_in_the_configured_schema(tmp_path) -> None:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL)
    try:
        async with admin.begin() as connection:
            await connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    except Exception as exc:
        await admin.dispose()
        missing_service(f"PostgreSQL not reachable at {POSTGRES_URL}: {type(exc).__name__}")
    settings = CommonSettings(
        CONCLAVE_DATABASE_URL=POSTGRES_URL,
        CONCLAVE_DATABASE_SCHEMA=schema,
        CONCLAVE_BUS_URL="memory://",
        CONCLAVE_DATA_DIR=tmp_path,
    )
    try:
        async with Platform.open(settings) as platform:
            async with platform.engine.connect() as connection:
                current = await connection.scalar(text("SELECT current_schema()"))
            assert current == schema
        async with admin.connect() as connection:
            tables = await connection.scalar(
                text(
                    "SELECT count(*) FROM information_schema.tables "
                    "WHERE table_schema = :schema AND table_name = 'outbox_events'"
                ),
                {"schema": schema},
            )
        assert tables == 1
    finally:
        async with admin.begin() as connection:
            await connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await admin.dispose()


def test_schema_name_must_be_a_plain_identifier() -> None:
    with pytest.raises(ValidationError):
        CommonSettings(CONCLAVE_DATABASE_SCHEMA='x"; DROP TABLE outbox_events; --')
