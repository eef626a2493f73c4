"""Verification of RFC 9162 inclusion and consistency proofs, step by step as sections 2.1.3.2
and 2.1.4.2 write them.

Before the RFC's loop runs, the inputs are checked for shape: sizes and indices are integers up
to 2^64 - 1 (the RFC's uint64), every hash is 32 bytes, and the proof has exactly the length the
sizes imply. The RFC's algorithm would refuse a proof of the wrong length too, but only after
hashing it: checked first, a hostile proof of a million entries costs nothing. Every failure is
an exception (:class:`OutOfRange`, :class:`MalformedProof`, :class:`RootMismatch`); a function
that returns has verified.

Cases the RFC leaves to the caller are decided as transparency-dev/merkle and Go's sumdb decide
them: a consistency "proof" between equal sizes is empty and holds when the roots are equal; one
from the empty tree is refused (:class:`OutOfRange`), since every tree extends it and there is
nothing to prove.
"""

from __future__ import annotations

from collections.abc import Sequence

from conclave.platform.transparency.errors import MalformedProof, OutOfRange, RootMismatch
from conclave.platform.transparency.hashing import (
    HASH_SIZE,
    check_hash,
    check_tree_size,
    node_hash,
)


def inclusion_proof_length(index: int, size: int) -> int:
    """How many hashes the inclusion proof of leaf ``index`` in a tree of ``size`` has: the
    levels below the node where the paths to ``index`` and ``size - 1`` part, plus one left
    sibling per set bit of the index above it (``0 <= index < size``)."""
    inner = (index ^ (size - 1)).bit_length()
    return inner + (index >> inner).bit_count()


def consistency_proof_length(old_size: int, new_size: int) -> int:
    """How many hashes the consistency proof from ``old_size`` to ``new_size`` has
    (``0 < old_size <= new_size``): the inclusion path of the old tree's last leaf from the level
    of its last complete piece, plus that piece itself unless the old tree is a power of two."""
    if old_size == new_size:
        return 0
    shift = (old_size & -old_size).bit_length() - 1
    length = inclusion_proof_length(old_size - 1, new_size) - shift
    return length if old_size == 1 << shift else length + 1


def _check_proof(proof: Sequence[bytes], length: int) -> None:
    if not isinstance(proof, Sequence) or isinstance(proof, bytes | str):
        raise MalformedProof("a proof is a sequence of hashes")
    if len(proof) != length:
        raise MalformedProof(f"the proof has {len(proof)} hashes where {length} are required")
    for item in proof:
        if not isinstance(item, bytes) or len(item) != HASH_SIZE:
            raise MalformedProof(f"every hash of a proof must be {HASH_SIZE} bytes")


def verify_inclusion(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root_hash: bytes
) -> None:
    """Check that ``leaf_hash`` is leaf ``index`` of the tree of ``size`` leaves whose root is
    ``root_hash`` (RFC 9162 section 2.1.3.2); raise if it is not proven."""
    check_tree_size(size)
    check_tree_size(index, "leaf index")
    # Step 1: an index at or beyond the tree size fails (so does every index of the empty tree).
    if index >= size:
        raise OutOfRange(f"leaf index {index} is not in a tree of {size} leaves")
    check_hash(leaf_hash, "the leaf hash")
    check_hash(root_hash, "the root hash")
    _check_proof(proof, inclusion_proof_length(index, size))
    # Steps 2-5.
    fn, sn = index, size - 1
    r = leaf_hash
    for p in proof:
        if sn == 0:
            raise MalformedProof("the proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise MalformedProof("the proof is shorter than the tree is deep")
    if r != root_hash:
        raise RootMismatch(f"the proof of leaf {index} does not lead to the root of {size} leaves")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree of ``new_size`` leaves and root ``new_root`` extends the tree of
    ``old_size`` leaves and root ``old_root`` (RFC 9162 section 2.1.4.2); raise if it is not
    proven."""
    check_tree_size(new_size)
    check_tree_size(old_size, "old tree size")
    if old_size > new_size:
        raise OutOfRange(f"a tree of {new_size} leaves cannot extend one of {old_size}")
    if old_size == 0:
        raise OutOfRange("RFC 9162 defines no consistency proof from the empty tree")
    check_hash(old_root, "the old root hash")
    check_hash(new_root, "the new root hash")
    _check_proof(proof, consistency_proof_length(old_size, new_size))
    if old_size == new_size:
        if old_root != new_root:
            raise RootMismatch(f"two different roots for the same tree size {old_size}")
        return
    # Step 1 (an empty proof fails) is held by the length check: 0 < old < new needs >= 1 hash.
    # Step 2: a power-of-two old tree is a complete subtree of the new one, its own first hash.
    path = [old_root, *proof] if old_size & (old_size - 1) == 0 else list(proof)
    # Steps 3-4.
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    # Steps 5-6.
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise MalformedProof("the proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    # Step 7.
    if sn != 0:
        raise MalformedProof("the proof is shorter than the tree is deep")
    if fr != old_root:
        raise RootMismatch(f"the proof does not lead to the old root of {old_size} leaves")
    if sr != new_root:
        raise RootMismatch(f"the proof does not lead to the new root of {new_size} leaves")
