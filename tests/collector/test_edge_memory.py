"""The embedded semantic memory's process: durability through kill -9, one owner per folder, and
no process left behind when the collector goes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conclave.collector.semantic.base import SemanticMemoryUnavailable, VectorRecord
from conclave.collector.semantic.edge import EdgeMemory
from conclave.collector.semantic.edge_shard import EdgeStore
from tests.conftest import eventually, process_gone

DIMENSIONS = 32


def _batch(number: int, size: int = 200) -> list[VectorRecord]:
    return [
        VectorRecord("docs", f"b{number}-{i}", "h", f"batch {number} record {i} crane survey")
        for i in range(size)
    ]


async def test_every_acknowledged_point_survives_a_kill_9_mid_write(tmp_path) -> None:
    memory = EdgeMemory(tmp_path / "shard", "hashing", DIMENSIONS, respawn_seconds=0.1)
    await memory.open()
    acknowledged: list[str] = []

    async def write_until_killed() -> None:
        number = 0
        while True:
            batch = _batch(number)
            await memory.upsert(batch)  # raises once the process is gone
            acknowledged.extend(record.key for record in batch)
            number += 1

    writer = asyncio.create_task(write_until_killed())
    try:
        await eventually(lambda: asyncio.sleep(0, len(acknowledged) >= 2000), timeout=30)
        pid = memory.process_id
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # in the middle of some batch's write or flush
        with pytest.raises(SemanticMemoryUnavailable):
            await writer
        # The next call starts a new process on the same folder: nothing acknowledged is lost.
        await asyncio.sleep(0.2)
        stored = {point.key for point in await memory.scan("docs")}
        assert memory.process_id not in (None, pid)
        assert set(acknowledged) <= stored
        assert len(stored) - len(acknowledged) in (0, 200)  # at most the unanswered batch
    finally:
        writer.cancel()
        await memory.close()


async def test_a_folder_open_in_another_process_is_unavailable_until_released(tmp_path) -> None:
    holder = EdgeStore.open(tmp_path / "shard", DIMENSIONS)
    memory = EdgeMemory(tmp_path / "shard", "hashing", DIMENSIONS, respawn_seconds=0.1)
    await memory.open()  # the collector starts: semantic memory is down, not the service
    try:
        with pytest.raises(SemanticMemoryUnavailable, match="open in another process"):
            await memory.ping()
        holder.close()

        async def back() -> bool:
            try:
                await memory.ping()
            except SemanticMemoryUnavailable:
                return False
            return True

        await eventually(back, timeout=60)
        await memory.upsert(_batch(0, 3))
        assert await memory.count("docs") == 3
    finally:
        await memory.close()


async def test_a_bad_embedder_fails_the_start(tmp_path) -> None:
    memory = EdgeMemory(tmp_path / "shard", "no.such.module:factory", DIMENSIONS)
    with pytest.raises(RuntimeError, match="ModuleNotFoundError"):
        await memory.open()
    assert memory.process_id is None


def test_the_memory_process_ends_with_its_collector_even_after_kill_9(tmp_path) -> None:
    # A collector that dies must not leave a process holding the folder's lock.
    program = textwrap.dedent(
        f"""
        import asyncio, sys
        from conclave.collector.semantic.edge import EdgeMemory

        async def main():
            memory = EdgeMemory({str(tmp_path / "shard")!r}, "hashing", {DIMENSIONS})
            await memory.open()
            print(memory.process_id, flush=True)
            await asyncio.sleep(3600)

        asyncio.run(main())
        """
    )
    collector = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE)
    assert collector.stdout is not None
    with collector.stdout:
        child = int(collector.stdout.readline())
    assert not process_gone(child)
    collector.kill()
    collector.wait()
    for _ in range(100):
        if process_gone(child):
            break
        time.sleep(0.1)
    assert process_gone(child)
    # And the folder is free for the next collector.
    EdgeStore.open(tmp_path / "shard", DIMENSIONS).close()
