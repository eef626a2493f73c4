"""Fixtures of the transparency tests: a migrated store of each kind for the stored logs."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine


@pytest.fixture(params=["sqlite", "postgres"])
def log_engine(request: pytest.FixtureRequest) -> AsyncEngine:
    """A migrated store: the test runs on SQLite and on PostgreSQL."""
    engine: AsyncEngine = request.getfixturevalue(f"{request.param}_engine")
    return engine
