"""Roots and proofs cross-checked with implementations that share no code with Conclave's.

1. **pymerkle 7** (PyPI, a dev dependency). Its hasher was read before relying on it: a leaf is
   ``sha256(0x00 || data)``, a node ``sha256(0x01 || left || right)``, the empty tree
   ``sha256()`` (``pymerkle/hasher.py`` with the default ``security=True``), and the first test
   below checks it against the published CT roots. Its *inclusion* path is RFC 9162's ``PATH``
   with the leaf's own hash in front, so those are compared hash for hash. Its *consistency* path
   is not RFC 9162's ``PROOF`` (it descends to the old tree's last leaf, with flags saying how to
   fold), so those proofs cannot be compared item by item: each side's proof is verified by its
   own verifier against the *other* side's roots instead.
2. **The RFC's recursive definitions** written out in ``trees.py`` (``MTH``, ``PATH``,
   ``SUBPROOF``): every proof of every small tree is compared exactly.
"""

from __future__ import annotations

import random

import pytest
from pymerkle import InmemoryTree
from pymerkle import verify_consistency as pymerkle_verify_consistency
from pymerkle.proof import InvalidProof

from conclave.platform.transparency import (
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    tree_root,
    verify_consistency,
    verify_inclusion,
)
from tests.platform.transparency.test_rfc9162_vectors import LEAF_INPUTS, ROOTS
from tests.platform.transparency.trees import (
    entries,
    reference_path,
    reference_proof,
    reference_root,
    tree_of,
)


def _pymerkle_tree(leaves: list[bytes]) -> InmemoryTree:
    tree = InmemoryTree(algorithm="sha256")
    for entry in leaves:
        tree.append_entry(entry)
    return tree


def test_pymerkle_hashes_as_rfc_9162_on_the_published_vectors() -> None:
    tree = _pymerkle_tree(LEAF_INPUTS)
    assert [tree.get_root(size) for size in range(len(ROOTS))] == ROOTS
    assert tree.get_leaf(1) == leaf_hash(LEAF_INPUTS[0])


@pytest.mark.parametrize("seed", range(4))
def test_roots_and_inclusion_proofs_equal_pymerkles(seed: int) -> None:
    chance = random.Random(seed)
    leaves = [chance.randbytes(chance.randrange(0, 40)) for _ in range(chance.randrange(1, 300))]
    ours = tree_of(0)
    ours.append(leaf_hash(entry) for entry in leaves)
    theirs = _pymerkle_tree(leaves)
    size = len(leaves)
    for prefix in range(size + 1):
        assert tree_root(ours, prefix) == theirs.get_root(prefix)
    for _ in range(60):
        tree_size = chance.randrange(1, size + 1)
        index = chance.randrange(tree_size)
        # pymerkle counts leaves from one and puts the leaf's own hash first.
        path = theirs.prove_inclusion(index + 1, tree_size).path
        assert path[0] == leaf_hash(leaves[index])
        assert inclusion_proof(ours, index, tree_size) == path[1:]


@pytest.mark.parametrize("seed", range(4))
def test_consistency_holds_for_both_implementations_against_the_others_roots(seed: int) -> None:
    chance = random.Random(100 + seed)
    leaves = [chance.randbytes(8) for _ in range(chance.randrange(2, 300))]
    ours = tree_of(0)
    ours.append(leaf_hash(entry) for entry in leaves)
    theirs = _pymerkle_tree(leaves)
    for _ in range(60):
        new = chance.randrange(1, len(leaves) + 1)
        old = chance.randrange(1, new + 1)
        their_old, their_new = theirs.get_root(old), theirs.get_root(new)
        verify_consistency(old, new, their_old, their_new, consistency_proof(ours, old, new))
        our_old, our_new = tree_root(ours, old), tree_root(ours, new)
        pymerkle_verify_consistency(our_old, our_new, theirs.prove_consistency(old, new))
        if old > 1:
            # pymerkle's check is not a formality: our root of another size fails it.
            with pytest.raises(InvalidProof):
                pymerkle_verify_consistency(
                    tree_root(ours, old - 1), our_new, theirs.prove_consistency(old, new)
                )


def test_every_proof_of_small_trees_is_the_rfcs_recursive_definition() -> None:
    for size in range(1, 34):
        leaves = entries(size)
        ours = tree_of(size)
        assert tree_root(ours, size) == reference_root(leaves)
        for index in range(size):
            proof = inclusion_proof(ours, index, size)
            assert proof == reference_path(index, leaves)
            verify_inclusion(leaf_hash(leaves[index]), index, size, proof, reference_root(leaves))
        for old in range(1, size + 1):
            proof = consistency_proof(ours, old, size)
            assert proof == reference_proof(old, leaves)
            verify_consistency(
                old, size, reference_root(leaves[:old]), reference_root(leaves), proof
            )
