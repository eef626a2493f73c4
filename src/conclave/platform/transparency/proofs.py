"""Roots, inclusion proofs and consistency proofs of RFC 9162 section 2.1, from stored subtrees.

Each is planned first (:func:`root_plan`, :func:`inclusion_plan`, :func:`consistency_plan`: which
complete subtrees it needs, with no storage at all), then read with one lookup, then folded
(:meth:`ProofPlan.assemble`). The plans walk the RFC's recursive definitions top-down without
recursion; each step names one range whose hash joins the proof, and a range costs at most
``log2`` of its size stored hashes. :func:`tree_root`, :func:`inclusion_proof` and
:func:`consistency_proof` do the three steps against a synchronous :class:`HashSource`.

Proof hashes come bottom-up, in the order RFC 9162 lists them (``PATH`` and ``PROOF``).
"""

from __future__ import annotations

from conclave.platform.transparency.errors import OutOfRange
from conclave.platform.transparency.hashing import EMPTY_ROOT, check_tree_size
from conclave.platform.transparency.subtrees import HashSource, ProofPlan, plan_ranges


def _split(size: int) -> int:
    """RFC 9162's ``k``: the largest power of two smaller than ``size`` (``size`` > 1)."""
    return 1 << ((size - 1).bit_length() - 1)


def root_plan(size: int) -> ProofPlan:
    """The plan of ``MTH(D[0:size])``: the complete subtrees of ``[0, size)``, one group.

    Empty for ``size`` 0, whose root is :data:`EMPTY_ROOT` and needs no lookup."""
    check_tree_size(size)
    return plan_ranges([(0, size)] if size else [])


def inclusion_plan(index: int, size: int) -> ProofPlan:
    """The plan of ``PATH(index, D[0:size])`` (RFC 9162 section 2.1.3.1).

    :class:`OutOfRange` unless ``0 <= index < size <= 2^64 - 1``."""
    check_tree_size(size)
    check_tree_size(index, "leaf index")
    if index >= size:
        raise OutOfRange(f"leaf index {index} is not in a tree of {size} leaves")
    ranges = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            # PATH(m, D[n]) = PATH(m, D[0:k]) : MTH(D[k:n])
            ranges.append((start + k, end))
            end = start + k
        else:
            # PATH(m, D[n]) = PATH(m - k, D[k:n]) : MTH(D[0:k])
            ranges.append((start, start + k))
            start += k
    ranges.reverse()
    return plan_ranges(ranges)


def consistency_plan(old_size: int, new_size: int) -> ProofPlan:
    """The plan of ``PROOF(old_size, D[0:new_size])`` (RFC 9162 section 2.1.4.1).

    Empty when the sizes are equal. :class:`OutOfRange` unless ``0 < old_size <= new_size <=
    2^64 - 1``: the RFC defines no proof from the empty tree (every tree extends it)."""
    check_tree_size(new_size)
    check_tree_size(old_size, "old tree size")
    if not 0 < old_size <= new_size:
        raise OutOfRange(
            f"no consistency proof from {old_size} to {new_size} leaves: "
            "RFC 9162 needs 0 < old size <= new size"
        )
    ranges = []
    start, end = 0, new_size
    # ``whole`` is SUBPROOF's ``b``: still true while the old tree is a left edge of the subtree.
    whole = True
    while end != old_size:
        k = _split(end - start)
        if old_size <= start + k:
            # SUBPROOF(m, D[n], b) = SUBPROOF(m, D[0:k], b) : MTH(D[k:n])
            ranges.append((start + k, end))
            end = start + k
        else:
            # SUBPROOF(m, D[n], b) = SUBPROOF(m - k, D[k:n], false) : MTH(D[0:k])
            ranges.append((start, start + k))
            start += k
            whole = False
    if not whole:
        # SUBPROOF(m, D[m], false) = {MTH(D[m])}: the old tree's last complete piece.
        ranges.append((start, end))
    ranges.reverse()
    return plan_ranges(ranges)


def tree_root(source: HashSource, size: int) -> bytes:
    """``MTH(D[0:size])``, read from ``source`` with one lookup of at most log2(size) + 1
    subtrees."""
    plan = root_plan(size)
    if not plan.subtrees:
        return EMPTY_ROOT
    return plan.assemble(source.subtree_hashes(plan.subtrees))[0]


def inclusion_proof(source: HashSource, index: int, size: int) -> list[bytes]:
    """The RFC 9162 inclusion proof of leaf ``index`` in the tree of ``size`` leaves."""
    plan = inclusion_plan(index, size)
    if not plan.subtrees:
        return []
    return plan.assemble(source.subtree_hashes(plan.subtrees))


def consistency_proof(source: HashSource, old_size: int, new_size: int) -> list[bytes]:
    """The RFC 9162 consistency proof from the tree of ``old_size`` leaves to ``new_size``."""
    plan = consistency_plan(old_size, new_size)
    if not plan.subtrees:
        return []
    return plan.assemble(source.subtree_hashes(plan.subtrees))
