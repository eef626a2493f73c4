"""RFC 9162 section 2.1.1 tree hashing with SHA-256.

A leaf hashes as ``SHA-256(0x00 || data)`` and an interior node as ``SHA-256(0x01 || left ||
right)``: the two prefixes keep a leaf from ever being passed off as a node (a second-preimage
attack on the tree). The hash of the empty tree is ``SHA-256()`` of nothing.
"""

from __future__ import annotations

import hashlib

from conclave.platform.transparency.errors import MalformedInput, OutOfRange

HASH_SIZE = 32
"""Bytes in every hash of the tree (SHA-256)."""

MAX_TREE_SIZE = 2**64 - 1
"""The largest tree size: RFC 9162 carries sizes and indices as uint64."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""The root hash of the tree of no leaves, ``MTH({}) = SHA-256()``."""

_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"


def leaf_hash(data: bytes) -> bytes:
    """The hash of a leaf whose entry is ``data``: ``SHA-256(0x00 || data)``."""
    return hashlib.sha256(_LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an interior node: ``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(_NODE_PREFIX + left + right).digest()


def check_hash(value: object, what: str) -> bytes:
    """``value`` if it is a 32-byte hash; :class:`MalformedInput` otherwise."""
    if not isinstance(value, bytes) or len(value) != HASH_SIZE:
        raise MalformedInput(f"{what} must be {HASH_SIZE} bytes")
    return value


def check_tree_size(value: object, what: str = "tree size") -> int:
    """``value`` if it is an integer from 0 to 2^64 - 1; :class:`OutOfRange` otherwise.

    Checked before any arithmetic, so an absurd number (10^400) costs nothing further."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise OutOfRange(f"{what} must be an integer")
    if not 0 <= value <= MAX_TREE_SIZE:
        raise OutOfRange(f"{what} must be from 0 to 2^64 - 1")
    return value
