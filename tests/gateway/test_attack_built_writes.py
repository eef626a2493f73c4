"""Attack tests of 0b16021: ``BatchWriter.write_built`` runs each caller's build in the shared
committer task. What one caller's build raises must reach that caller only ("what it raises is
raised here, and the batch commits without this caller's writes"), never the committer."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.gateway.tools import Tool, ToolContext
from conclave.platform.clock import utc_now
from conclave.platform.db.batch import BatchWriter, Insert
from conclave.platform.db.schema import consumed_events
from tests.conftest import Backend, eventually, test_settings
from tests.gateway.conftest import run_gateway


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest) -> AsyncEngine:
    engine: AsyncEngine = request.getfixturevalue(f"{request.param}_engine")
    return engine


def consumed(event_id: str) -> Insert:
    return Insert(
        consumed_events, {"consumer_group": "t", "event_id": event_id, "consumed_at": utc_now()}
    )


def consumed_rows(event_id: str) -> list[Insert]:
    return [consumed(event_id)]


async def stored_ids(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as connection:
        return set((await connection.scalars(select(consumed_events.c.event_id))).all())


class Interrupted(BaseException):
    """What a build may raise that is not an ``Exception`` (as KeyboardInterrupt, SystemExit,
    or a plug-in's own BaseException subclass reached through ``default=str``)."""


def _raising(exc: BaseException) -> Callable[[], list[Insert]]:
    def build() -> list[Insert]:
        raise exc

    return build


class Unprintable(BaseException):
    """A BaseException whose ``str()`` raises (a second attack: the first fix worded the
    caller's error with it, and what it raised ended the committer)."""

    def __str__(self) -> str:
        raise ValueError("no text for this one")


class UnprintableStop(StopIteration):
    def __str__(self) -> str:
        raise ValueError("no text for this one")


@pytest.mark.parametrize(
    "raised",
    [
        StopIteration("an empty iterator's next()"),
        Interrupted("stop"),
        Unprintable(),
        UnprintableStop(),
    ],
    ids=["StopIteration", "BaseException", "unprintable", "unprintable-StopIteration"],
)
async def test_what_a_build_raises_never_stops_the_committer(
    engine: AsyncEngine, raised: BaseException
) -> None:
    """One caller's build raises StopIteration (an ordinary Exception: ``next()`` on an empty
    iterator) or a BaseException subclass.

    A user would notice every write of the process hang: the other callers in that batch and
    every later ``write``/``write_built`` wait forever (the gateway's calls never answer, their
    audit rows are never written). ``_built`` (platform/db/batch.py) calls
    ``item.done.set_exception(exc)``, which asyncio refuses for StopIteration with a TypeError
    raised in the committer, and catches only ``Exception``, so a BaseException also ends the
    committer task (SQLite has one committer; nothing restarts it)."""
    writer = BatchWriter(engine, max_batch=16)
    await writer.start()
    try:
        good = [str(uuid.uuid4()) for _ in range(6)]
        calls = [
            writer.write_built(functools.partial(consumed_rows, event_id)) for event_id in good
        ]
        calls.insert(3, writer.write_built(_raising(raised)))
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5)
        later = str(uuid.uuid4())
        await asyncio.wait_for(writer.write(consumed(later)), 5)
        assert [r for i, r in enumerate(results) if i != 3] == [None] * 6
        assert isinstance(results[3], RuntimeError)  # the caller learns what its build raised
        assert type(raised).__name__ in str(results[3])
        assert await stored_ids(engine) == {*good, later}
    finally:
        for task in writer._tasks:  # a committer that died: do not hang the test's teardown
            if task.done():
                with contextlib.suppress(BaseException):
                    task.result()
        if all(not task.done() for task in writer._tasks):
            await asyncio.wait_for(writer.stop(), 5)


class _LazyList(list):  # type: ignore[type-arg]
    """A plug-in's result type: a list whose truth value is worked out from an iterator."""

    def __bool__(self) -> bool:
        return next(iter(()))  # raises StopIteration


async def _lazy(_args: dict[str, Any], _ctx: ToolContext) -> Any:
    return _LazyList([1, 2])


LAZY = Tool(
    name="lazy_list",
    description="Answers a list subclass whose truth value raises StopIteration.",
    executor=_lazy,
    parameters={"type": "object"},
    annotations={"readOnlyHint": True},
)


async def test_one_tools_odd_result_does_not_stop_every_later_call(
    backend: Backend, tmp_path: Path
) -> None:
    """A (plug-in) tool answers a list subclass whose ``__bool__`` raises StopIteration; the
    result passes the result checks (it is JSON: ``[1, 2]``).

    A user would notice that call, and then every later governed call of every user, never
    answered: ``json_sha256`` (platform/tlog/entries.py, the new empty-list shortcut
    ``if not value and type(value) is list``) now calls the value's ``__bool__`` before looking
    at its type; the StopIteration leaves the build the committer runs (``_queued_leaf`` catches
    only ValueError/TypeError/RecursionError), and ``_built`` (platform/db/batch.py) hands it to
    ``Future.set_exception``, which raises TypeError for StopIteration inside the committer task,
    ending it. Before 0b16021 the same result was hashed through its stored form and the call
    succeeded and was logged."""
    settings = test_settings(call_log=True, data_dir=tmp_path)
    async with run_gateway(backend, settings, (LAZY,)) as client:
        odd = await asyncio.wait_for(
            client.post("/execute", json={"tool": "lazy_list", "args": {}}), 10
        )
        after = await asyncio.wait_for(
            client.post(
                "/execute", json={"tool": "evaluate_expression", "args": {"expression": "6 * 7"}}
            ),
            10,
        )
        assert odd.status_code == 200, odd.text
        assert after.status_code == 200, after.text
        assert odd.json()["result"] == [1, 2] and odd.json()["log_leaf_hash"]

        async def verified() -> Any:
            found = (await client.get(f"/calls/{odd.json()['conclave_id']}/verify")).json()
            return found if found.get("log_index") is not None else None

        found = await eventually(verified, timeout=60)  # in a checkpoint about a second later
        assert found["ok"] is True and found["problem"] is None
