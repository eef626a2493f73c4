"""Receipts and consistency bundles: the JSON documents a log hands out so that anyone holding
its verifier keys can check, with no server, that an entry is in the log and that the log never
rewrote its past.

A **receipt** (``conclave.receipt/v1``) says "the entry whose leaf hash is H is leaf I of the
log O, under this signed checkpoint"::

    {"format": "conclave.receipt/v1",
     "origin": "<the log's origin>",
     "index": <leaf index, an integer>,
     "leaf_hash": "<base64 of the 32-byte RFC 9162 leaf hash>",
     "checkpoint": "<the signed checkpoint, note text with its signature lines>",
     "inclusion_proof": ["<base64 hash>", ...]}

A **consistency bundle** (``conclave.consistency/v1``) says "the checkpoint ``new`` extends the
checkpoint ``old``"::

    {"format": "conclave.consistency/v1",
     "old": "<signed checkpoint>", "new": "<signed checkpoint>",
     "proof": ["<base64 hash>", ...]}

Parsing is strict, so a document has one reading: exactly these keys (no more, none twice),
exactly these JSON types, canonical base64, an index from 0 to 2^64 - 1 written with at most 20
digits, at most 65 proof hashes (the longest RFC 9162 proof of a uint64 tree), and a document of
at most :data:`MAX_DOCUMENT_BYTES`. Everything else is a :class:`MalformedInput` of the core's
hierarchy; a well-formed document whose claim does not hold is a :class:`VerificationFailed`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from conclave.platform.transparency import base64text
from conclave.platform.transparency.checkpoint import (
    SignedCheckpoint,
    open_checkpoint,
    verify_extension,
)
from conclave.platform.transparency.errors import (
    ClaimUnprovable,
    MalformedInput,
    MalformedProof,
    OutOfRange,
    RootMismatch,
    UnverifiedNote,
)
from conclave.platform.transparency.hashing import HASH_SIZE, check_tree_size, leaf_hash
from conclave.platform.transparency.note import MAX_NOTE_BYTES, VerifierSet
from conclave.platform.transparency.verify import verify_inclusion

RECEIPT_FORMAT = "conclave.receipt/v1"
"""The ``format`` of a receipt this code writes and reads."""

CONSISTENCY_FORMAT = "conclave.consistency/v1"
"""The ``format`` of a consistency bundle this code writes and reads."""

MAX_PROOF_HASHES = 65
"""The most hashes a proof document may hold: an RFC 9162 proof in a tree of at most 2^64 - 1
leaves has at most 64 (inclusion) or 65 (consistency); the verifier then requires the exact
length the sizes imply."""

MAX_DOCUMENT_BYTES = 2 * MAX_NOTE_BYTES + 65_536
"""The largest document read: two signed notes of the largest size, and their proof."""

_MAX_INDEX_DIGITS = 20
_RECEIPT_KEYS = frozenset(
    {"format", "origin", "index", "leaf_hash", "checkpoint", "inclusion_proof"}
)
_BUNDLE_KEYS = frozenset({"format", "old", "new", "proof"})


class LeafMismatch(RootMismatch):
    """The entry's bytes do not hash to the receipt's leaf hash: the receipt is of another entry."""


@dataclass(frozen=True, slots=True)
class Receipt:
    """A receipt: leaf ``index`` of the log ``origin`` has ``leaf_hash`` under ``checkpoint``."""

    origin: str
    index: int
    leaf_hash: bytes
    checkpoint: str
    inclusion_proof: tuple[bytes, ...]

    def to_json(self) -> dict[str, Any]:
        """The receipt as its JSON document."""
        return {
            "format": RECEIPT_FORMAT,
            "origin": self.origin,
            "index": self.index,
            "leaf_hash": base64text.encode(self.leaf_hash),
            "checkpoint": self.checkpoint,
            "inclusion_proof": [base64text.encode(item) for item in self.inclusion_proof],
        }

    @classmethod
    def parse(cls, document: bytes | str | dict[str, Any]) -> Receipt:
        """The receipt ``document`` (JSON text, or already decoded) holds; :class:`MalformedInput`
        unless it has exactly the receipt's keys and types."""
        fields = _object(document, _RECEIPT_KEYS, RECEIPT_FORMAT, "a receipt")
        origin = _text(fields["origin"], "origin", 4096)
        index = fields["index"]
        if isinstance(index, bool) or not isinstance(index, int):
            raise MalformedInput("index is an integer")
        check_tree_size(index, "the leaf index")
        return cls(
            origin,
            index,
            _hash(fields["leaf_hash"], "leaf_hash"),
            _text(fields["checkpoint"], "checkpoint", MAX_NOTE_BYTES),
            _proof(fields["inclusion_proof"], "inclusion_proof"),
        )


@dataclass(frozen=True, slots=True)
class ConsistencyBundle:
    """Two signed checkpoints of one log and the consistency proof from the older to the newer."""

    old: str
    new: str
    proof: tuple[bytes, ...]

    def to_json(self) -> dict[str, Any]:
        """The bundle as its JSON document."""
        return {
            "format": CONSISTENCY_FORMAT,
            "old": self.old,
            "new": self.new,
            "proof": [base64text.encode(item) for item in self.proof],
        }

    @classmethod
    def parse(cls, document: bytes | str | dict[str, Any]) -> ConsistencyBundle:
        """The bundle ``document`` holds; :class:`MalformedInput` unless it is shaped exactly."""
        fields = _object(document, _BUNDLE_KEYS, CONSISTENCY_FORMAT, "a consistency bundle")
        return cls(
            _text(fields["old"], "old", MAX_NOTE_BYTES),
            _text(fields["new"], "new", MAX_NOTE_BYTES),
            _proof(fields["proof"], "proof"),
        )


def verify_receipt(
    receipt: Receipt, verifiers: VerifierSet, data: bytes | None = None
) -> SignedCheckpoint:
    """Check ``receipt`` with the log's verifier keys; the opened checkpoint if it holds.

    The checkpoint must open with ``verifiers``, be the receipt's log (``origin``) and be signed
    by a key named after that origin (a key of another log the reader also trusts proves
    nothing about this one); the inclusion proof must lead from the leaf hash at ``index`` to the
    checkpoint's root at its size; and ``data``, when given, must hash to the leaf hash
    (:class:`LeafMismatch`). Raises the core's errors otherwise."""
    if not isinstance(receipt, Receipt):
        raise MalformedInput("a receipt is a Receipt (Receipt.parse reads one)")
    signed = open_log_checkpoint(receipt.checkpoint, verifiers, receipt.origin)
    checkpoint = signed.checkpoint
    if receipt.index >= checkpoint.size:
        raise ClaimUnprovable(
            f"leaf {receipt.index} is not in the checkpoint's tree of {checkpoint.size} leaves"
        )
    with _unprovable():
        verify_inclusion(
            receipt.leaf_hash,
            receipt.index,
            checkpoint.size,
            list(receipt.inclusion_proof),
            checkpoint.root_hash,
        )
    if data is not None:
        if not isinstance(data, bytes):
            raise MalformedInput("the entry's data is bytes")
        if leaf_hash(data) != receipt.leaf_hash:
            raise LeafMismatch("the entry's bytes do not hash to the receipt's leaf hash")
    return signed


def verify_consistency_bundle(
    bundle: ConsistencyBundle, verifiers: VerifierSet, *, origin: str | None = None
) -> tuple[SignedCheckpoint, SignedCheckpoint]:
    """Check that ``bundle.new`` extends ``bundle.old``: both open with ``verifiers``, are of one
    log (``origin`` if given), signed by its key, and the proof holds
    (:func:`verify_extension`). The two opened checkpoints, old then new."""
    if not isinstance(bundle, ConsistencyBundle):
        raise MalformedInput("a bundle is a ConsistencyBundle (ConsistencyBundle.parse reads one)")
    old = open_log_checkpoint(bundle.old, verifiers, origin)
    new = open_log_checkpoint(bundle.new, verifiers, old.checkpoint.origin)
    with _unprovable():
        verify_extension(old.checkpoint, new.checkpoint, list(bundle.proof))
    return old, new


@contextmanager
def _unprovable() -> Iterator[None]:
    """Numbers and proofs of a document that parsed, which cannot prove its claim (a proof of
    the wrong length, a rollback): a claim that does not hold, not a document that cannot be
    read."""
    try:
        yield
    except (OutOfRange, MalformedProof) as error:
        raise ClaimUnprovable(str(error)) from error


def open_log_checkpoint(
    note: str, verifiers: VerifierSet, origin: str | None = None
) -> SignedCheckpoint:
    """Open a checkpoint as a receipt's reader must: with ``verifiers``, of ``origin`` if given,
    and signed by a key named after its origin (C2SP: a log's key is named after its origin), not
    only by some other key the reader also trusts."""
    signed = open_checkpoint(note, verifiers, origin=origin)
    by_log = [sig for sig in signed.note.signatures if sig.name == signed.checkpoint.origin]
    if not by_log:
        raise UnverifiedNote(
            f"no key named after the log {signed.checkpoint.origin!r} signed the checkpoint",
            signed.note,
        )
    return signed


def _object(document: object, keys: frozenset[str], format_name: str, what: str) -> dict[str, Any]:
    if isinstance(document, bytes | str):
        fields = _decode(document, what)
    elif isinstance(document, dict):
        fields = document
    else:
        raise MalformedInput(f"{what} is a JSON object")
    if not isinstance(fields, dict):
        raise MalformedInput(f"{what} is a JSON object")
    if set(fields) != keys:
        missing = sorted(keys - set(fields))
        extra = sorted(str(key)[:64] for key in set(fields) - keys)
        raise MalformedInput(
            f"{what} has exactly the keys {sorted(keys)} (missing {missing}, unexpected {extra})"
        )
    if fields["format"] != format_name:
        raise MalformedInput(f"{what}'s format is {format_name!r}")
    return fields


def _decode(document: bytes | str, what: str) -> object:
    if len(document) > MAX_DOCUMENT_BYTES:
        raise MalformedInput(f"{what} is at most {MAX_DOCUMENT_BYTES} bytes")
    if isinstance(document, bytes):
        try:
            document = document.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedInput(f"{what} is UTF-8 JSON") from None
    try:
        return json.loads(
            document,
            object_pairs_hook=_unique_keys,
            parse_int=_bounded_int,
            parse_float=_no_float,
            parse_constant=_no_float,
        )
    except MalformedInput:
        raise
    except (ValueError, RecursionError):
        raise MalformedInput(f"{what} is not JSON") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key, value in pairs:
        if key in fields:
            raise MalformedInput(f"the key {key[:64]!r} appears twice")
        fields[key] = value
    return fields


def _bounded_int(text: str) -> int:
    # Refused by its length before any conversion: 10^400 costs nothing (and Python's own limit
    # of 4300 digits would raise something else).
    if len(text.lstrip("-")) > _MAX_INDEX_DIGITS:
        raise OutOfRange("an integer of the document has more than 20 digits")
    return int(text)


def _no_float(text: str) -> Any:
    raise MalformedInput("the document holds no fractional number, NaN or infinity")


def _text(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise MalformedInput(f"{what} is a string")
    if len(value) > limit:
        raise MalformedInput(f"{what} is at most {limit} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedInput(f"{what} is valid UTF-8 (no lone surrogate)") from None
    return value


def _hash(value: object, what: str) -> bytes:
    if not isinstance(value, str) or len(value) != 44:
        raise MalformedInput(f"{what} is the base64 of a {HASH_SIZE}-byte hash")
    decoded = base64text.decode(value, what)
    if len(decoded) != HASH_SIZE:
        raise MalformedInput(f"{what} is the base64 of a {HASH_SIZE}-byte hash")
    return decoded


def _proof(value: object, what: str) -> tuple[bytes, ...]:
    if not isinstance(value, list):
        raise MalformedProof(f"{what} is a list of base64 hashes")
    if len(value) > MAX_PROOF_HASHES:
        raise MalformedProof(f"{what} has at most {MAX_PROOF_HASHES} hashes")
    hashes: Sequence[bytes] = [_hash(item, f"a hash of {what}") for item in value]
    return tuple(hashes)
