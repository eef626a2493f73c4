"""Apply the Alembic migrations programmatically (``conclave migrate`` and startup)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.db.engine import is_sqlite

_MIGRATIONS = Path(__file__).with_name("migrations")
# Any 64-bit constant: replicas starting together take turns to migrate.
_ADVISORY_LOCK_KEY = 0x636F6E636C617665


def alembic_config() -> Config:
    """An Alembic config pointing at Conclave's migrations (no ini file needed)."""
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    return config


def head_revision() -> str | None:
    """The newest revision shipped with this version of Conclave."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the store is at (``None`` for an empty store)."""

    def _read(connection: Any) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as connection:
        return await connection.run_sync(_read)


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Upgrade the store to ``revision``; safe when several processes call it at once."""
    config = alembic_config()

    def _upgrade(connection: Any) -> None:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)

    async with engine.connect() as connection:
        if not is_sqlite(engine):
            await connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _ADVISORY_LOCK_KEY})
            await connection.commit()
        try:
            await connection.run_sync(_upgrade)
            await connection.commit()
        finally:
            if not is_sqlite(engine):
                await connection.execute(
                    text("SELECT pg_advisory_unlock(:k)"), {"k": _ADVISORY_LOCK_KEY}
                )
                await connection.commit()
