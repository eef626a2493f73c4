"""Properties of proofs over random trees: every proof verifies, and any change to it, its leaf,
its index, its sizes or its roots makes it fail; a proof costs O(log n) stored hashes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conclave.platform.transparency import (
    MalformedProof,
    RootMismatch,
    TransparencyError,
    consistency_plan,
    consistency_proof,
    inclusion_plan,
    inclusion_proof,
    root_plan,
    tree_root,
    verify_consistency,
    verify_inclusion,
)
from conclave.platform.transparency.hashing import MAX_TREE_SIZE
from conclave.platform.transparency.subtrees import Subtree
from conclave.platform.transparency.verify import (
    consistency_proof_length,
    inclusion_proof_length,
)
from tests.platform.transparency.trees import (
    PROPERTIES,
    SameLeafSource,
    reference_path_sides,
    reference_proof_sides,
    tree_of,
)

SIZES = st.integers(min_value=1, max_value=1500)
HUGE_SIZES = st.integers(min_value=1, max_value=MAX_TREE_SIZE)


def _flip(data: bytes, position: int, bit: int) -> bytes:
    changed = bytearray(data)
    changed[position % len(changed)] ^= 1 << bit
    return bytes(changed)


@PROPERTIES
@given(size=SIZES, data=st.data())
def test_every_inclusion_proof_verifies_and_no_altered_one_does(
    size: int, data: st.DataObject
) -> None:
    tree = tree_of(size)
    index = data.draw(st.integers(0, size - 1), label="index")
    leaf = tree.subtree_hashes([Subtree(0, index)])[0]
    root = tree_root(tree, size)
    proof = inclusion_proof(tree, index, size)
    verify_inclusion(leaf, index, size, proof, root)

    position = data.draw(st.integers(0, 31), label="byte")
    bit = data.draw(st.integers(0, 7), label="bit")
    with pytest.raises(RootMismatch):
        verify_inclusion(_flip(leaf, position, bit), index, size, proof, root)
    with pytest.raises(RootMismatch):
        verify_inclusion(leaf, index, size, proof, _flip(root, position, bit))
    if proof:
        item = data.draw(st.integers(0, len(proof) - 1), label="item")
        altered = [*proof]
        altered[item] = _flip(altered[item], position, bit)
        with pytest.raises(RootMismatch):
            verify_inclusion(leaf, index, size, altered, root)
        with pytest.raises(MalformedProof):
            verify_inclusion(leaf, index, size, proof[:-1], root)
    with pytest.raises(MalformedProof):
        verify_inclusion(leaf, index, size, [*proof, root], root)

    other = data.draw(st.integers(0, size - 1), label="other index")
    if other != index:
        with pytest.raises(TransparencyError):
            verify_inclusion(leaf, other, size, proof, root)
    # A proof binds the tree size only through the shape of the leaf's path: another size that
    # gives the same shape verifies alike. The signed checkpoint is what binds size and root.
    other_size = data.draw(st.integers(index + 1, 2 * size + 64), label="other size")
    if reference_path_sides(index, other_size) == reference_path_sides(index, size):
        verify_inclusion(leaf, index, other_size, proof, root)
    else:
        with pytest.raises(TransparencyError):
            verify_inclusion(leaf, index, other_size, proof, root)


@PROPERTIES
@given(size=SIZES, data=st.data())
def test_every_consistency_proof_verifies_and_no_altered_one_does(
    size: int, data: st.DataObject
) -> None:
    tree = tree_of(size)
    old = data.draw(st.integers(1, size), label="old size")
    old_root, new_root = tree_root(tree, old), tree_root(tree, size)
    proof = consistency_proof(tree, old, size)
    verify_consistency(old, size, old_root, new_root, proof)

    position = data.draw(st.integers(0, 31), label="byte")
    bit = data.draw(st.integers(0, 7), label="bit")
    with pytest.raises(RootMismatch):
        verify_consistency(old, size, _flip(old_root, position, bit), new_root, proof)
    with pytest.raises(RootMismatch):
        verify_consistency(old, size, old_root, _flip(new_root, position, bit), proof)
    if proof:
        item = data.draw(st.integers(0, len(proof) - 1), label="item")
        altered = [*proof]
        altered[item] = _flip(altered[item], position, bit)
        with pytest.raises(RootMismatch):
            verify_consistency(old, size, old_root, new_root, altered)
    with pytest.raises(MalformedProof):
        verify_consistency(old, size, old_root, new_root, [*proof, new_root])

    # As for inclusion, sizes are bound only through the shape of the proof.
    shape = reference_proof_sides(old, size)
    other_old = data.draw(st.integers(1, size), label="other old size")
    other_new = data.draw(st.integers(old, 2 * size + 64), label="other new size")
    for old_size, new_size in [(other_old, size), (old, other_new)]:
        if reference_proof_sides(old_size, new_size) == shape:
            verify_consistency(old_size, new_size, old_root, new_root, proof)
        else:
            with pytest.raises(TransparencyError):
                verify_consistency(old_size, new_size, old_root, new_root, proof)


@PROPERTIES
@given(size=HUGE_SIZES, data=st.data())
def test_proofs_in_trees_up_to_2_64_leaves_verify_with_log_n_lookups(
    size: int, data: st.DataObject
) -> None:
    # A real tree of identical leaves answers any subtree in O(1), so sizes no memory could hold
    # exercise the planning arithmetic and the RFC verification loops end to end.
    source = SameLeafSource()
    index = data.draw(st.integers(0, size - 1), label="index")
    old = data.draw(st.integers(1, size), label="old size")
    root = tree_root(source, size)
    levels = size.bit_length()

    source.lookups = 0
    proof = inclusion_proof(source, index, size)
    assert len(proof) == inclusion_proof_length(index, size) <= levels
    assert source.lookups <= 2 * levels
    verify_inclusion(source.levels[0], index, size, proof, root)

    source.lookups = 0
    proof = consistency_proof(source, old, size)
    assert len(proof) == consistency_proof_length(old, size) <= levels + 1
    assert source.lookups <= 2 * levels
    verify_consistency(old, size, tree_root(source, old), root, proof)
    if proof:
        with pytest.raises(RootMismatch):
            verify_consistency(old, size, tree_root(source, old), root, [*proof[:-1], root])


@PROPERTIES
@given(size=HUGE_SIZES, data=st.data())
def test_the_proof_lengths_the_verifier_expects_are_those_the_plans_make(
    size: int, data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, size - 1), label="index")
    old = data.draw(st.integers(1, size), label="old size")
    assert len(inclusion_plan(index, size).groups) == inclusion_proof_length(index, size)
    assert len(consistency_plan(old, size).groups) == consistency_proof_length(old, size)
    assert len(root_plan(size).subtrees) == size.bit_count()
