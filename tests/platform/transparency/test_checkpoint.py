"""Checkpoints (C2SP tlog-checkpoint): one spelling, signed by the log's key named after its
origin, opened with the log's verifier keys, and cosignable by a witness (C2SP
tlog-cosignature)."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from conclave.platform.transparency import (
    EMPTY_ROOT,
    Checkpoint,
    MalformedCheckpoint,
    NoteSignature,
    NoteSigner,
    UnexpectedOrigin,
    UnverifiedNote,
    VerifierSet,
    open_checkpoint,
    sign_checkpoint,
    tree_root,
)
from conclave.platform.transparency.note_keys import key_id
from tests.platform.transparency.trees import tree_of

ORIGIN = "conclave.example/logs/gateway-calls"
ROOT = bytes(range(32))
ROOT_TEXT = base64.b64encode(ROOT).decode()
URL_SAFE_ROOT_TEXT = base64.urlsafe_b64encode(bytes([0xFB]) * 32).decode()


def log_key(seed: int = 1) -> NoteSigner:
    return NoteSigner(ORIGIN, bytes([seed]) * 32)


def test_the_text_is_origin_size_and_root_one_per_line() -> None:
    checkpoint = Checkpoint(ORIGIN, 20852163, ROOT)
    assert checkpoint.text() == f"{ORIGIN}\n20852163\n{ROOT_TEXT}\n"
    assert Checkpoint.parse(checkpoint.text()) == checkpoint
    assert Checkpoint(ORIGIN, 0, EMPTY_ROOT).text().splitlines()[1] == "0"
    extended = Checkpoint(ORIGIN, 5, ROOT, ("ext one", "ext two"))
    assert extended.text().endswith(f"{ROOT_TEXT}\next one\next two\n")
    assert Checkpoint.parse(extended.text()) == extended


def test_gos_sumdb_tree_note_parses() -> None:
    # golang.org/x/mod/sumdb/tlog note_test.go's golden tree: its origin line holds spaces,
    # which C2SP allows (an origin only SHOULD be a schema-less URL).
    text = "go.sum database tree\n123456789012\nTszzRgjTG6xce+z2AG31kAXYKBgQVtCSCE40HmuwBb0=\n"
    checkpoint = Checkpoint.parse(text)
    assert (checkpoint.origin, checkpoint.size) == ("go.sum database tree", 123456789012)
    assert checkpoint.text() == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        f"{ORIGIN}\n12\n{ROOT_TEXT}",  # no final newline
        f"{ORIGIN}\n12\n",  # no root hash
        f"\n12\n{ROOT_TEXT}\n",  # empty origin
        f"{ORIGIN}\n012\n{ROOT_TEXT}\n",  # leading zero
        f"{ORIGIN}\n00\n{ROOT_TEXT}\n",
        f"{ORIGIN}\n+12\n{ROOT_TEXT}\n",
        f"{ORIGIN}\n-1\n{ROOT_TEXT}\n",
        f"{ORIGIN}\n1_000\n{ROOT_TEXT}\n",
        f"{ORIGIN}\n 12\n{ROOT_TEXT}\n",
        f"{ORIGIN}\n\u0661\u0662\n{ROOT_TEXT}\n",  # Arabic-Indic digits int() would take
        f"{ORIGIN}\n18446744073709551616\n{ROOT_TEXT}\n",  # 2^64
        f"{ORIGIN}\n{10**400}\n{ROOT_TEXT}\n",
        f"{ORIGIN}\n12\n{ROOT_TEXT[:-1]}\n",  # unpadded
        f"{ORIGIN}\n12\n{base64.b64encode(ROOT[:31]).decode()}\n",  # 31 bytes
        f"{ORIGIN}\n12\n{URL_SAFE_ROOT_TEXT}\n",  # the URL-safe alphabet
        f"{ORIGIN}\n12\n{ROOT_TEXT}\n\n",  # empty extension line
        f"{ORIGIN}\r\n12\n{ROOT_TEXT}\n",
    ],
)
def test_anything_spelt_otherwise_is_malformed(text: str) -> None:
    with pytest.raises(MalformedCheckpoint):
        Checkpoint.parse(text)


def test_the_largest_tree_size_is_2_64_minus_1() -> None:
    checkpoint = Checkpoint.parse(f"{ORIGIN}\n18446744073709551615\n{ROOT_TEXT}\n")
    assert checkpoint.size == 2**64 - 1


def test_a_signed_checkpoint_opens_with_the_logs_key() -> None:
    tree = tree_of(1000)
    checkpoint = Checkpoint(ORIGIN, 1000, tree_root(tree, 1000))
    signed = sign_checkpoint(checkpoint, log_key())
    assert signed.decode().startswith(checkpoint.text() + f"\n\u2014 {ORIGIN} ")
    opened = open_checkpoint(signed, VerifierSet([log_key().verifier]), origin=ORIGIN)
    assert opened.checkpoint == checkpoint
    assert [s.name for s in opened.note.signatures] == [ORIGIN]


def test_a_checkpoint_of_another_log_or_key_is_refused() -> None:
    signed = sign_checkpoint(Checkpoint(ORIGIN, 3, ROOT), log_key())
    with pytest.raises(UnexpectedOrigin):
        open_checkpoint(signed, VerifierSet([log_key().verifier]), origin="other.example/log")
    with pytest.raises(UnverifiedNote):
        open_checkpoint(signed, VerifierSet([log_key(seed=2).verifier]))
    with pytest.raises(MalformedCheckpoint):
        sign_checkpoint(Checkpoint(ORIGIN, 3, ROOT), NoteSigner("other.example/log", bytes(32)))


def test_a_rotated_key_is_listed_beside_the_old_one() -> None:
    # Rotation: the new key has the same name (the origin) and another id; readers hold both
    # verifier keys, so checkpoints signed before and after the rotation both open.
    old_key, new_key = log_key(seed=1), log_key(seed=2)
    assert old_key.key_id != new_key.key_id
    readers = VerifierSet([old_key.verifier, new_key.verifier])
    before = sign_checkpoint(Checkpoint(ORIGIN, 3, ROOT), old_key)
    after = sign_checkpoint(Checkpoint(ORIGIN, 4, ROOT), new_key)
    assert open_checkpoint(before, readers).checkpoint.size == 3
    assert open_checkpoint(after, readers).checkpoint.size == 4
    # During the change-over the log signs with both; a reader with either key opens it.
    checkpoint = Checkpoint(ORIGIN, 5, ROOT)
    by_old = open_checkpoint(sign_checkpoint(checkpoint, old_key), readers)
    both = sign_checkpoint(checkpoint, new_key, keep=by_old.note.signatures)
    for reader in (old_key.verifier, new_key.verifier):
        assert open_checkpoint(both, VerifierSet([reader])).checkpoint == checkpoint


def test_a_witness_can_cosign_and_the_logs_readers_still_open_it() -> None:
    # A witness per C2SP tlog-cosignature (Ed25519, type 0x04): it signs "cosignature/v1\ntime
    # <t>\n" + the checkpoint text and appends its line; this witness is written here with
    # `cryptography` alone, as an independent party would be.
    checkpoint = Checkpoint(ORIGIN, 7, ROOT)
    signed = sign_checkpoint(checkpoint, log_key())
    witness = Ed25519PrivateKey.from_private_bytes(b"\x07" * 32)
    witness_public = witness.public_key().public_bytes_raw()
    witness_name, timestamp = "witness.example/w1", 1679315147
    message = f"cosignature/v1\ntime {timestamp}\n".encode() + checkpoint.text().encode()
    signature = timestamp.to_bytes(8, "big") + witness.sign(message)
    cosignature = NoteSignature(witness_name, key_id(witness_name, 0x04, witness_public), signature)
    cosigned = signed + cosignature.line().encode()

    opened = open_checkpoint(cosigned, VerifierSet([log_key().verifier]), origin=ORIGIN)
    assert opened.checkpoint == checkpoint
    (kept,) = opened.note.unverified
    assert kept == cosignature
    # What the witness signed can be checked from the note as the log's readers received it.
    assert kept.signature[:8] == timestamp.to_bytes(8, "big")
    witness.public_key().verify(
        kept.signature[8:],
        b"cosignature/v1\ntime %d\n" % timestamp + opened.note.text.encode(),
    )
