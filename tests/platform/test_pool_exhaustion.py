"""A pool with no connection free in time (a flood of reads holds them all) is "store unavailable"
to the request that waited: 503 with Retry-After, never a 500."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from conclave.platform.db.engine import store_errors
from conclave.platform.errors import StoreUnavailable
from tests.conftest import POSTGRES_URL


@pytest.mark.postgres
async def test_a_request_that_finds_the_pool_exhausted_gets_store_unavailable(
    postgres_engine: object,  # the server is up (or the test skips / fails under CI)
) -> None:
    engine = create_async_engine(POSTGRES_URL, pool_size=1, max_overflow=0, pool_timeout=0.2)
    try:
        async with engine.connect() as held:
            await held.execute(text("SELECT 1"))
            with pytest.raises(StoreUnavailable) as refused, store_errors():
                async with engine.connect() as waiting:
                    await waiting.execute(text("SELECT 1"))
        problem = refused.value
        assert (problem.status, problem.code) == (503, "STORE_UNAVAILABLE")
    finally:
        await engine.dispose()
