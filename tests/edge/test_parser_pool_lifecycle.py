"""The parser pool hands a freed worker to the first upload still waiting, and keeps exactly its
number of workers through what an outside attack tried on it: uploads that go away while their
worker starts, workers killed from outside, a service stopping while uploads parse and wait, and
tens of thousands of waiting uploads leaving the line at once."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from conclave.edge.parsing import ParserPool
from conclave.platform.errors import Unavailable, Unprocessable
from tests.conftest import eventually
from tests.edge import samples

_MEMORY = 2 * 1024**3


def _live(pool: ParserPool) -> list[int]:
    return [worker.process.pid for worker in pool._all if worker.process.is_alive()]


def _geojson(path, features: int) -> None:
    point = '{"type":"Feature","geometry":{"type":"Point","coordinates":[1.0,2.0]}},'
    path.write_text(
        '{"type":"FeatureCollection","features":[' + point * features + point[:-1] + "]}"
    )


@asynccontextmanager
async def _one_busy_worker(
    tmp_path, *, queue_seconds: float, features: int = 200_000, timeout: float = 30
) -> AsyncIterator[tuple[ParserPool, asyncio.Task, str]]:
    """A pool of one worker, busy parsing a slow file: the pool, that parse, and a small file's
    path."""
    slow = tmp_path / "slow.geojson"
    _geojson(slow, features)
    small = tmp_path / "small.geojson"
    small.write_bytes(samples.geojson())
    pool = ParserPool(1, timeout=timeout, memory_bytes=_MEMORY, queue_seconds=queue_seconds)
    try:
        await pool.prestart()
        busy = asyncio.create_task(pool.parse("geo", str(slow), "geojson", {}))

        async def taken() -> bool:
            return pool.free == 0

        await eventually(taken)
        yield pool, busy, str(small)
    finally:
        await pool.close()


async def test_uploads_that_stop_waiting_leave_the_worker_to_the_next_in_line(tmp_path) -> None:
    """Uploads that gave up (their request went away) neither take the freed worker nor keep
    their place."""
    async with _one_busy_worker(tmp_path, queue_seconds=60) as (pool, busy, small):
        gone = [asyncio.create_task(pool.parse("geo", small, "geojson", {})) for _ in range(50)]
        waiting = asyncio.create_task(pool.parse("geo", small, "geojson", {}))
        await asyncio.sleep(0.05)  # all of them in line behind the slow file
        for task in gone:
            task.cancel()
        facts = await waiting
        assert facts["feature_count"] == 2  # its own file's answer
        assert (await busy)["feature_count"] == 200_001
        assert all(task.cancelled() for task in gone)
        assert pool.free == 1  # the one worker is back, idle
        assert len(pool._all) == 1  # and nobody started another


async def test_an_upload_whose_wait_ran_out_hands_on_a_worker_it_was_given(tmp_path) -> None:
    async with _one_busy_worker(tmp_path, queue_seconds=0.1) as (pool, busy, small):
        with pytest.raises(Unavailable) as refused:
            await pool.parse("geo", small, "geojson", {})
        assert refused.value.code == "PARSERS_BUSY"
        await busy
        assert pool.free == 1
        facts = await pool.parse("geo", small, "geojson", {})
        assert facts["feature_count"] == 2


async def test_an_upload_cancelled_while_its_worker_starts_leaves_no_process(tmp_path) -> None:
    small = tmp_path / "small.geojson"
    small.write_bytes(samples.geojson())
    pool = ParserPool(1, timeout=30, memory_bytes=_MEMORY, queue_seconds=60)
    try:
        for _ in range(3):  # requests that go away while "their" worker imports its parsers
            upload = asyncio.create_task(pool.parse("geo", str(small), "geojson", {}))
            await asyncio.sleep(0.05)
            upload.cancel()
            await asyncio.gather(upload, return_exceptions=True)
        facts = await pool.parse("geo", str(small), "geojson", {})
        assert facts["feature_count"] == 2
        assert len(_live(pool)) == 1  # a pool of one worker: one process
        assert len(pool._all) == 1
    finally:
        await pool.close()


async def test_a_worker_killed_while_idle_is_replaced_and_forgotten(tmp_path) -> None:
    small = tmp_path / "small.geojson"
    small.write_bytes(samples.geojson())
    pool = ParserPool(1, timeout=30, memory_bytes=_MEMORY)
    try:
        dead = []
        for _ in range(3):
            await pool.prestart()
            [worker] = [worker for worker in pool._all if worker.process.is_alive()]
            os.kill(worker.process.pid, signal.SIGKILL)
            dead.append(worker.process.pid)
            worker.process.join(5)  # dead, and seen dead, before the next upload
            facts = await pool.parse("geo", str(small), "geojson", {})  # on a new worker
            assert facts["feature_count"] == 2
            assert worker.connection.closed  # its pipe is not kept open
        assert not set(pool.worker_pids()) & set(dead), pool.worker_pids()
        assert len(pool._all) == 1
    finally:
        await pool.close()


async def test_closing_the_pool_ends_parses_and_waits_and_starts_nothing_after(tmp_path) -> None:
    busy_pool = _one_busy_worker(tmp_path, queue_seconds=60, features=400_000, timeout=20)
    async with busy_pool as (pool, busy, small):
        waiting = [asyncio.create_task(pool.parse("geo", small, "geojson", {})) for _ in range(3)]
        await asyncio.sleep(0.1)
        await pool.close()
        closed = time.monotonic()
        results = await asyncio.wait_for(asyncio.gather(busy, *waiting, return_exceptions=True), 60)
        # Far below the parse's 20 s time limit: the parse under way read its worker's end of file.
        assert time.monotonic() - closed < 10
        for result in results:  # the service is stopping: 503, not the file's fault (422)
            assert isinstance(result, Unavailable), result
            assert result.code == "UNAVAILABLE"
            assert result.headers == {"Retry-After": "1"}
        await asyncio.sleep(0.5)
        assert _live(pool) == []  # nothing started after close()
        with pytest.raises(Unavailable):
            await pool.parse("geo", small, "geojson", {})


async def test_many_waiting_uploads_leave_the_line_without_freezing_the_loop() -> None:
    pool = ParserPool(1, timeout=30, memory_bytes=0, queue_seconds=60)
    held = await pool._take()  # the one slot is in use (as by a slow file's parse)
    waiting = [asyncio.create_task(pool._take()) for _ in range(30_000)]
    await asyncio.sleep(0)  # all in line
    started = time.perf_counter()
    for task in reversed(waiting):  # the last to come go first
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    took = time.perf_counter() - started
    assert not pool._waiting
    # Cancelling 30,000 tasks that wait on a future takes about 0.5 s here; leaving the line
    # was a scan of the whole line per upload (7-8 s, the loop blocked).
    assert took < 5, f"30,000 waiting uploads took {took:.1f} s to leave the line"
    pool._put(held)
    assert pool.free == 1


async def test_a_worker_that_cannot_be_started_is_not_blamed_on_the_file(tmp_path) -> None:
    """Out of file descriptors (or memory), no worker starts: 422 PARSER_FAILED, as for a
    worker that does not start in time, not CORRUPT_MEDIA (the file crashed its parser)."""
    small = tmp_path / "small.geojson"
    small.write_bytes(samples.geojson())
    pool = ParserPool(1, timeout=30, memory_bytes=_MEMORY)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        # No descriptor left for the worker's pipe.
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")), hard))
        with pytest.raises(Unprocessable) as refused:
            await pool.parse("geo", str(small), "geojson", {})
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert refused.value.code == "PARSER_FAILED"
    assert pool.free == 1  # its slot is back: the next upload starts a worker
    facts = await pool.parse("geo", str(small), "geojson", {})
    assert facts["feature_count"] == 2
    await pool.close()
