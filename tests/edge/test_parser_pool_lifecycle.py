"""The parser pool keeps exactly its number of workers through what an outside attack tried on it:
uploads that go away while their worker starts, workers killed from outside, a service stopping
while uploads parse and wait, and tens of thousands of waiting uploads leaving the line at once."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from conclave.edge.parsing import ParserPool
from conclave.platform.errors import Unavailable
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
    slow = tmp_path / "slow.geojson"
    _geojson(slow, 400_000)
    small = tmp_path / "small.geojson"
    small.write_bytes(samples.geojson())
    pool = ParserPool(1, timeout=20, memory_bytes=_MEMORY, queue_seconds=60)
    await pool.prestart()
    busy = asyncio.create_task(pool.parse("geo", str(slow), "geojson", {}))

    async def taken() -> bool:
        return pool.free == 0

    await eventually(taken)
    waiting = [asyncio.create_task(pool.parse("geo", str(small), "geojson", {})) for _ in range(3)]
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
        await pool.parse("geo", str(small), "geojson", {})


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
