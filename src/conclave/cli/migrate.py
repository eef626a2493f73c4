"""``conclave migrate``: apply the schema to the configured store."""

from __future__ import annotations

import asyncio

from rich.console import Console

from conclave.platform.db.engine import create_engine
from conclave.platform.db.migrate import current_revision, migrate
from conclave.settings import CommonSettings

console = Console(stderr=True)


def migrate_command() -> None:
    """Apply pending migrations (Alembic; the same ones on SQLite and PostgreSQL)."""
    settings = CommonSettings()
    revision = asyncio.run(_migrate(settings))
    console.print(f"store at revision [bold]{revision}[/bold]")


async def _migrate(settings: CommonSettings) -> str | None:
    engine = create_engine(settings.resolved_database_url())
    try:
        await migrate(engine)
        return await current_revision(engine)
    finally:
        await engine.dispose()
