"""Receipts and consistency bundles: written, parsed strictly, verified with the log's keys alone,
and refused when any byte is changed or the input is hostile."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conclave.platform.transparency import (
    Checkpoint,
    ClaimUnprovable,
    ConsistencyBundle,
    LeafMismatch,
    MalformedInput,
    NoteSigner,
    Receipt,
    RootMismatch,
    TransparencyError,
    UnexpectedOrigin,
    UnverifiedNote,
    VerificationFailed,
    VerifierSet,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    sign_checkpoint,
    sign_note,
    tree_root,
    verify_consistency_bundle,
    verify_receipt,
)
from tests.platform.transparency.trees import entries, tree_of

ORIGIN = "conclave.example/calls"
KEY = NoteSigner(ORIGIN, bytes([7]) * 32)
VERIFIERS = VerifierSet([KEY.verifier])


def signed(size: int, signer: NoteSigner = KEY, origin: str = ORIGIN) -> str:
    tree = tree_of(size)
    return sign_checkpoint(Checkpoint(origin, size, tree_root(tree, size)), signer).decode()


def receipt_of(index: int, size: int) -> Receipt:
    tree = tree_of(size)
    return Receipt(
        ORIGIN,
        index,
        leaf_hash(entries(size)[index]),
        signed(size),
        tuple(inclusion_proof(tree, index, size)),
    )


def bundle_of(old: int, new: int) -> ConsistencyBundle:
    tree = tree_of(new)
    return ConsistencyBundle(signed(old), signed(new), tuple(consistency_proof(tree, old, new)))


def test_a_receipt_round_trips_through_json_and_verifies_with_the_entry() -> None:
    receipt = receipt_of(5, 13)
    text = json.dumps(receipt.to_json())
    parsed = Receipt.parse(text)
    assert parsed == receipt
    assert json.loads(text)["format"] == "conclave.receipt/v1"
    opened = verify_receipt(parsed, VERIFIERS, entries(6)[5])
    assert opened.checkpoint.size == 13


def test_every_leaf_of_small_trees_has_a_receipt_that_verifies() -> None:
    for size in range(1, 20):
        for index in range(size):
            verify_receipt(Receipt.parse(json.dumps(receipt_of(index, size).to_json())), VERIFIERS)


def test_the_wrong_entry_is_refused() -> None:
    with pytest.raises(LeafMismatch):
        verify_receipt(receipt_of(5, 13), VERIFIERS, entries(7)[6])


def test_flipping_any_byte_of_the_document_is_refused() -> None:
    document = json.dumps(receipt_of(5, 13).to_json()).encode()
    for position in range(len(document)):
        changed = bytearray(document)
        changed[position] ^= 0x01
        with pytest.raises(TransparencyError):
            verify_receipt(Receipt.parse(bytes(changed)), VERIFIERS, entries(6)[5])


def test_flipping_any_bit_of_the_hashes_is_refused() -> None:
    receipt = receipt_of(6, 11)
    for position in range(32):
        for bit in range(8):
            leaf = bytearray(receipt.leaf_hash)
            leaf[position] ^= 1 << bit
            changed = Receipt(ORIGIN, 6, bytes(leaf), receipt.checkpoint, receipt.inclusion_proof)
            with pytest.raises(RootMismatch):
                verify_receipt(changed, VERIFIERS)
    for item in range(len(receipt.inclusion_proof)):
        proof = [bytearray(hash_) for hash_ in receipt.inclusion_proof]
        proof[item][0] ^= 0x80
        changed = Receipt(
            ORIGIN, 6, receipt.leaf_hash, receipt.checkpoint, tuple(bytes(h) for h in proof)
        )
        with pytest.raises(RootMismatch):
            verify_receipt(changed, VERIFIERS)


def test_another_index_or_a_shorter_proof_is_refused() -> None:
    receipt = receipt_of(6, 11)
    for index in (5, 7, 10):
        # A receipt that reads fine but whose proof cannot prove its claim does not verify
        # (conclave verify's status 1), whatever the reason: never "malformed" (status 2).
        with pytest.raises(VerificationFailed):
            verify_receipt(
                Receipt(
                    ORIGIN, index, receipt.leaf_hash, receipt.checkpoint, receipt.inclusion_proof
                ),
                VERIFIERS,
            )
    with pytest.raises(ClaimUnprovable, match="not in the checkpoint's tree"):
        verify_receipt(
            Receipt(ORIGIN, 11, receipt.leaf_hash, receipt.checkpoint, receipt.inclusion_proof),
            VERIFIERS,
        )
    with pytest.raises(ClaimUnprovable):
        verify_receipt(
            Receipt(ORIGIN, 6, receipt.leaf_hash, receipt.checkpoint, receipt.inclusion_proof[1:]),
            VERIFIERS,
        )


def test_keys_and_origins_must_be_the_logs() -> None:
    receipt = receipt_of(2, 4)
    stranger = NoteSigner(ORIGIN, bytes([8]) * 32)
    with pytest.raises(UnverifiedNote):
        verify_receipt(receipt, VerifierSet([stranger.verifier]))
    claimed = Receipt(
        "conclave.example/other",
        2,
        receipt.leaf_hash,
        receipt.checkpoint,
        receipt.inclusion_proof,
    )
    with pytest.raises(UnexpectedOrigin):
        verify_receipt(claimed, VERIFIERS)
    # A checkpoint of this log signed by a key of another log the reader also trusts proves
    # nothing about this log.
    other = NoteSigner("conclave.example/other", bytes([9]) * 32)
    tree = tree_of(4)
    note = sign_note(Checkpoint(ORIGIN, 4, tree_root(tree, 4)).text(), [other]).decode()
    forged = Receipt(ORIGIN, 2, receipt.leaf_hash, note, receipt.inclusion_proof)
    with pytest.raises(UnverifiedNote):
        verify_receipt(forged, VerifierSet([KEY.verifier, other.verifier]))


def valid_receipt_json() -> dict[str, Any]:
    return receipt_of(2, 4).to_json()


@pytest.mark.parametrize(
    "change",
    [
        {"format": "conclave.receipt/v2"},
        {"index": -1},
        {"index": 2**64},
        {"index": True},
        {"index": 2.0},
        {"index": "2"},
        {"index": None},
        {"origin": 5},
        {"origin": "a" * 5000},
        {"origin": "\ud800"},
        {"leaf_hash": "AAAA"},
        {"leaf_hash": "A" * 43 + "B"},
        {"leaf_hash": "-" * 43 + "="},
        {"leaf_hash": None},
        {"checkpoint": ["x"]},
        {"checkpoint": "x" * (2 << 20)},
        {"inclusion_proof": "AAAA"},
        {"inclusion_proof": ["A" * 43 + "="] * 66},
        {"inclusion_proof": [5]},
        {"inclusion_proof": {"a": 1}},
        {"extra": 1},
    ],
)
def test_hostile_receipts_are_typed_errors(change: dict[str, Any]) -> None:
    document = valid_receipt_json() | change
    with pytest.raises(MalformedInput):
        Receipt.parse(json.dumps(document))
    with pytest.raises(MalformedInput):
        Receipt.parse(document)


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b"[]",
        b"null",
        b"\xff\xfe",
        b"{" * 100_000,
        b"[" * 100_000,
        b'{"index": 1' + b"0" * 400 + b"}",
        b'{"index": NaN}',
        b'{"index": 1e3}',
        b" " * (3 << 20),
    ],
)
def test_hostile_documents_are_typed_errors(text: bytes) -> None:
    with pytest.raises(MalformedInput):
        Receipt.parse(text)
    with pytest.raises(MalformedInput):
        ConsistencyBundle.parse(text)


def test_a_repeated_key_is_refused() -> None:
    text = json.dumps(valid_receipt_json())
    with pytest.raises(MalformedInput):
        Receipt.parse(text[:-1] + ', "index": 3}')
    with pytest.raises(MalformedInput):
        Receipt.parse(text.replace('"format"', '"missing"'))


def test_a_bundle_round_trips_and_verifies() -> None:
    for old, new in [(1, 1), (1, 2), (3, 7), (4, 8), (7, 7), (6, 33)]:
        bundle = ConsistencyBundle.parse(json.dumps(bundle_of(old, new).to_json()))
        first, second = verify_consistency_bundle(bundle, VERIFIERS, origin=ORIGIN)
        assert (first.checkpoint.size, second.checkpoint.size) == (old, new)


def test_a_bundle_from_the_empty_tree_has_an_empty_proof() -> None:
    bundle = ConsistencyBundle(signed(0), signed(5), ())
    verify_consistency_bundle(bundle, VERIFIERS)


def test_a_fork_is_refused() -> None:
    forked_tree = tree_of(8, salt=b"fork")
    forked = sign_checkpoint(Checkpoint(ORIGIN, 8, tree_root(forked_tree, 8)), KEY).decode()
    honest = bundle_of(3, 8)
    with pytest.raises(RootMismatch):
        verify_consistency_bundle(ConsistencyBundle(honest.old, forked, honest.proof), VERIFIERS)


def test_flipping_any_byte_of_a_bundle_is_refused() -> None:
    document = json.dumps(bundle_of(3, 6).to_json()).encode()
    for position in range(len(document)):
        changed = bytearray(document)
        changed[position] ^= 0x01
        with pytest.raises(TransparencyError):
            verify_consistency_bundle(ConsistencyBundle.parse(bytes(changed)), VERIFIERS)


def test_bundles_of_two_logs_or_backwards_are_refused() -> None:
    other = NoteSigner("conclave.example/other", bytes([9]) * 32)
    both = VerifierSet([KEY.verifier, other.verifier])
    mixed = ConsistencyBundle(signed(3), signed(6, other, "conclave.example/other"), ())
    with pytest.raises(UnexpectedOrigin):
        verify_consistency_bundle(mixed, both)
    # A rollback reads fine and does not hold: a monitor alerting on "not verified" sees it.
    backwards = ConsistencyBundle(signed(6), signed(3), ())
    with pytest.raises(ClaimUnprovable, match="cannot extend"):
        verify_consistency_bundle(backwards, VERIFIERS)
