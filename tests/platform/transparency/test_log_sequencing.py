"""The sequencer: one allocation per batch, contiguous indices in commit order, no gap after a
batch that fails, whatever the number of concurrent writers."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.tlog import LeafTooLarge, TransparencyLog
from conclave.platform.transparency import MalformedInput
from tests.platform.transparency.stored_logs import (
    open_test_log,
    recorded_statements,
    stored_leaves,
)


async def test_a_batch_gets_consecutive_indices_in_the_order_given(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine)

    first = await log.append([b"a", b"b", b"c"])
    second = await log.append([b"d"])

    assert (first, second) == (range(0, 3), range(3, 4))
    assert await stored_leaves(log_engine, log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    state = await log.state()
    assert (state.sequenced_size, state.integrated_size) == (4, 0)


async def test_one_allocation_per_batch_whatever_its_size(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine)

    with recorded_statements(log_engine) as statements:
        await log.append([bytes([i]) for i in range(250)])
        await log.append([b"x"])

    allocations = [s for s in statements if s.lstrip().upper().startswith("UPDATE TLOG_LOGS")]
    assert len(allocations) == 2
    assert all("sequenced_size" in s and "RETURNING" in s.upper() for s in allocations)
    leaf_inserts = [s for s in statements if "INSERT INTO tlog_leaves" in s]
    assert len(leaf_inserts) == 2  # one statement per batch too
    assert (await log.state()).sequenced_size == 251


async def test_batches_appended_together_share_one_transaction(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine)
    await log.append([b"first"])

    with recorded_statements(log_engine) as statements:
        ranges = await asyncio.gather(
            *(log.append([f"{n}/{i}".encode() for i in range(n % 4 + 1)]) for n in range(20))
        )

    allocations = [s for s in statements if s.lstrip().upper().startswith("UPDATE TLOG_LOGS")]
    assert len(allocations) == 1
    # Each batch its own consecutive indices, in the order the batches were appended.
    assert [len(r) for r in ranges] == [n % 4 + 1 for n in range(20)]
    assert [r.start for r in ranges[1:]] == [r.stop for r in ranges[:-1]]
    assert ranges[0].start == 1
    stored = dict(await stored_leaves(log_engine, log))
    assert [stored[i] for i in ranges[7]] == [f"7/{i}".encode() for i in range(4)]


async def test_concurrent_writers_get_disjoint_contiguous_ranges(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine)

    async def writer(number: int) -> list[range]:
        ranges = []
        for batch in range(8):
            entries = [f"{number}/{batch}/{i}".encode() for i in range(1 + (number + batch) % 5)]
            ranges.append(await log.append(entries))
        return ranges

    results = await asyncio.gather(*(writer(number) for number in range(6)))

    indices = sorted(index for ranges in results for r in ranges for index in r)
    assert indices == list(range(len(indices)))
    stored = dict(await stored_leaves(log_engine, log))
    for number, ranges in enumerate(results):
        for batch, indices_of_batch in enumerate(ranges):
            assert [stored[i] for i in indices_of_batch] == [
                f"{number}/{batch}/{i}".encode() for i in range(len(indices_of_batch))
            ]


async def test_a_batch_that_fails_before_commit_leaves_no_gap(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine)
    await log.append([b"kept"])

    async def fail() -> None:
        raise RuntimeError("the process dies here")

    with pytest.raises(RuntimeError):
        await log.append([b"lost", b"lost too"], inside_transaction=fail)

    assert await log.append([b"next"]) == range(1, 2)
    assert await stored_leaves(log_engine, log) == [(0, b"kept"), (1, b"next")]
    assert (await log.state()).sequenced_size == 2


async def test_an_empty_batch_touches_nothing(log_engine: AsyncEngine) -> None:
    log = await open_test_log(log_engine)
    with recorded_statements(log_engine) as statements:
        assert await log.append([]) == range(0)
    assert statements == []


async def test_entries_must_be_bytes_within_the_limits(log_engine: AsyncEngine) -> None:
    log = await TransparencyLog.open(
        log_engine,
        "limits",
        (await open_test_log(log_engine, name="limits")).keys,
        max_leaf_bytes=10,
        max_batch_leaves=3,
        max_batch_bytes=25,
    )
    for entries in (b"abc", "abc", [b"a", "b"], [None], [bytearray(b"a")], [1], None, 7):
        with pytest.raises(MalformedInput):
            await log.append(entries)  # type: ignore[arg-type]
    with pytest.raises(LeafTooLarge):
        await log.append([b"x" * 11])
    with pytest.raises(LeafTooLarge):
        await log.append([b"x"] * 4)
    with pytest.raises(LeafTooLarge):
        await log.append([b"x" * 10, b"x" * 10, b"x" * 10])

    assert await log.append([b"", b"x" * 10]) == range(0, 2)  # an empty leaf is a leaf
    assert await stored_leaves(log_engine, log) == [(0, b""), (1, b"x" * 10)]
