"""The append frontier: batches fold into the same tree however they are cut, every completed
subtree is yielded once for storage, and a writer resumes from stored hashes alone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conclave.platform.transparency import (
    EMPTY_ROOT,
    AppendFrontier,
    InMemoryHashSource,
    MalformedInput,
    SubtreeNotStored,
    leaf_hash,
    tree_root,
)
from conclave.platform.transparency.subtrees import Subtree
from tests.platform.transparency.trees import PROPERTIES, entries, reference_root


def test_an_empty_frontier_is_the_empty_tree() -> None:
    frontier = AppendFrontier()
    assert frontier.size == 0
    assert frontier.root() == EMPTY_ROOT
    assert frontier.subtrees == []
    batch = frontier.append([])
    assert (batch.first_index, batch.stored, batch.root) == (0, [], EMPTY_ROOT)


@PROPERTIES
@given(cuts=st.lists(st.integers(0, 70), max_size=12))
def test_batches_cut_anyhow_make_the_tree_of_all_their_leaves(cuts: list[int]) -> None:
    leaves = entries(sum(cuts))
    frontier = AppendFrontier()
    stored: list[Subtree] = []
    position = 0
    for count in cuts:
        batch = frontier.append(leaf_hash(entry) for entry in leaves[position : position + count])
        assert batch.first_index == position
        position += count
        assert batch.frontier.size == position
        assert batch.root == reference_root(leaves[:position])
        stored.extend(row.subtree for row in batch.stored)
        frontier = batch.frontier
    # Every complete subtree of the final tree was yielded exactly once, leaves included.
    size = len(leaves)
    expected = [
        Subtree(level, index)
        for level in range(size.bit_length())
        for index in range(size >> level)
    ]
    assert sorted(stored) == sorted(expected)
    assert len(frontier.subtrees) == size.bit_count()


@PROPERTIES
@given(cuts=st.lists(st.integers(0, 70), max_size=8), lowest=st.integers(0, 7))
def test_keeping_only_upper_levels_makes_the_same_tree(cuts: list[int], lowest: int) -> None:
    """What a store that keeps levels ``lowest`` and up is handed: exactly those subtrees of a
    full batch, with the same frontier and root."""
    leaves = [leaf_hash(entry) for entry in entries(sum(cuts))]
    full, kept = AppendFrontier(), AppendFrontier()
    position = 0
    for count in cuts:
        chunk = leaves[position : position + count]
        position += count
        every, upper = full.append(chunk), kept.append(chunk, lowest_kept=lowest)
        assert upper.stored == [row for row in every.stored if row.subtree.level >= lowest]
        assert (upper.root, upper.first_index) == (every.root, every.first_index)
        assert upper.frontier.subtrees == every.frontier.subtrees
        full, kept = every.frontier, upper.frontier


def test_the_stored_hashes_are_the_subtrees_hashes() -> None:
    leaves = entries(37)
    source = InMemoryHashSource()
    batch = source.append(leaf_hash(entry) for entry in leaves)
    for row in batch.stored:
        assert row.hash == reference_root(leaves[row.subtree.start : row.subtree.end])


def test_a_writer_resumes_from_the_stored_frontier_alone() -> None:
    leaves = entries(1000)
    source = InMemoryHashSource.of_entries(leaves)
    more = [b"more" + bytes([n]) for n in range(5)]
    for size in [0, 1, 2, 3, 511, 512, 513, 999, 1000]:
        resumed = AppendFrontier.read(source, size)
        assert resumed.size == size
        assert resumed.root() == tree_root(source, size)
        # It goes on as a writer that had appended everything itself.
        batch = resumed.append(leaf_hash(entry) for entry in more)
        assert batch.root == reference_root([*leaves[:size], *more])
    with pytest.raises(SubtreeNotStored):
        AppendFrontier.read(source, 1024)


def test_a_frontier_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(MalformedInput):
        AppendFrontier(3, [EMPTY_ROOT])  # 3 leaves are two complete subtrees
    with pytest.raises(MalformedInput):
        AppendFrontier(1, [b"short"])
    with pytest.raises(MalformedInput):
        AppendFrontier().append([b"not a 32-byte hash"])


def test_a_failed_batch_leaves_the_frontier_as_it_was() -> None:
    frontier = AppendFrontier().append([leaf_hash(b"a")]).frontier
    with pytest.raises(MalformedInput):
        frontier.append([leaf_hash(b"b"), b"bad"])
    assert frontier.size == 1
    assert frontier.root() == leaf_hash(b"a")


def test_the_in_memory_source_refuses_what_it_does_not_hold() -> None:
    source = InMemoryHashSource.of_entries(entries(6))
    assert len(source.subtree_hashes([Subtree(1, 2), Subtree(2, 0)])) == 2
    for missing in [Subtree(0, 6), Subtree(1, 3), Subtree(3, 0), Subtree(0, -1), Subtree(-1, 0)]:
        with pytest.raises(SubtreeNotStored):
            source.subtree_hashes([missing])


def test_a_level_below_zero_keeps_every_level() -> None:
    hashes = [leaf_hash(bytes([n])) for n in range(4)]
    every = AppendFrontier().append(hashes).stored
    assert AppendFrontier().append(hashes, lowest_kept=-1).stored == every
