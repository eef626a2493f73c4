"""Re-check of ccdbef3's fix in platform/db/batch.py: whatever a build raises must reach its
caller only, never end the committer."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.db.batch import BatchWriter
from tests.gateway.test_attack_built_writes import consumed, consumed_rows, stored_ids


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest) -> AsyncEngine:
    engine: AsyncEngine = request.getfixturevalue(f"{request.param}_engine")
    return engine


class Unprintable(BaseException):
    """A BaseException (a plug-in's own, reached through a value's ``__bool__`` or ``default=``)
    whose ``str()`` raises."""

    def __str__(self) -> str:
        raise ValueError("no text for this one")


class UnprintableStop(StopIteration):
    def __str__(self) -> str:
        raise ValueError("no text for this one")


@pytest.mark.parametrize("raised", [Unprintable, UnprintableStop])
async def test_a_build_raising_an_unprintable_base_exception_does_not_end_the_committer(
    engine: AsyncEngine, raised: type[BaseException]
) -> None:
    """One caller's build raises a BaseException (or StopIteration) whose ``str()`` raises.

    A user would notice every governed call of the process hang, then fail: the other callers in
    that batch wait forever, and every later ``write``/``write_built`` raises StoreUnavailable
    ("The group committer has stopped"; SQLite has one committer, nothing restarts it).

    Why: ``_for_a_future`` (platform/db/batch.py) formats ``f"... {exc}"``, which calls the
    exception's ``__str__`` inside ``_built``'s ``except`` block; what that raises leaves
    ``_built``, ``_commit`` and ``_commit_until_stopped``, ending the committer task with the
    rest of its batch unanswered. Fix: word the RuntimeError without ``str(exc)`` (or guard it),
    and keep ``_built`` from letting anything out."""

    def build() -> list:
        raise raised()

    writer = BatchWriter(engine, max_batch=16)
    await writer.start()
    try:
        good = [str(uuid.uuid4()) for _ in range(6)]
        calls = [
            writer.write_built(functools.partial(consumed_rows, event_id)) for event_id in good
        ]
        calls.insert(3, writer.write_built(build))
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5)
        later = str(uuid.uuid4())
        await asyncio.wait_for(writer.write(consumed(later)), 5)
        assert [r for i, r in enumerate(results) if i != 3] == [None] * 6
        assert isinstance(results[3], RuntimeError)
        assert await stored_ids(engine) == {*good, later}
    finally:
        for task in writer._tasks:  # a committer that died: do not hang the teardown
            if task.done():
                with contextlib.suppress(BaseException):
                    task.result()
        if all(not task.done() for task in writer._tasks):
            await asyncio.wait_for(writer.stop(), 5)
