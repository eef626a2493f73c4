"""Hostile input to every parser and verifier of the transparency kit.

Each refusal is a :class:`TransparencyError` of the kind that says why (never a ``TypeError``,
``UnicodeError`` or ``binascii.Error`` escaping, never a crash), and the work is bounded: sizes
are checked before arithmetic, proof lengths before hashing, note sizes before decoding.
"""

from __future__ import annotations

import base64
import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conclave.platform.transparency import (
    EMPTY_ROOT,
    AppendFrontier,
    Checkpoint,
    MalformedCheckpoint,
    MalformedKey,
    MalformedNote,
    MalformedProof,
    NoteSigner,
    NoteVerifier,
    OutOfRange,
    TransparencyError,
    UnverifiedNote,
    VerifierSet,
    consistency_plan,
    inclusion_plan,
    leaf_hash,
    open_checkpoint,
    open_note,
    root_plan,
    sign_note,
    verify_consistency,
    verify_inclusion,
)
from conclave.platform.transparency.note import MAX_NOTE_BYTES
from tests.platform.transparency.test_note import (
    PETER_SIG,
    PETER_SKEY,
    PETER_VKEY,
    TEXT,
    peter,
)
from tests.platform.transparency.trees import PROPERTIES

HUGE = 10**400
LEAF = leaf_hash(b"leaf")


@pytest.mark.parametrize(
    ("index", "size"),
    [(HUGE, HUGE + 1), (0, HUGE), (2**64, 2**64 + 1), (-1, 5), (5, 5), (6, 5), (0, 0)],
)
def test_indices_and_sizes_beyond_uint64_or_the_tree_are_out_of_range(
    index: int, size: int
) -> None:
    with pytest.raises(OutOfRange):
        verify_inclusion(LEAF, index, size, [], EMPTY_ROOT)
    with pytest.raises(OutOfRange):
        inclusion_plan(index, size)


@pytest.mark.parametrize(("old", "new"), [(1, HUGE), (HUGE, HUGE), (0, 3), (4, 3), (-2, 3)])
def test_consistency_sizes_out_of_range(old: int, new: int) -> None:
    with pytest.raises(OutOfRange):
        verify_consistency(old, new, EMPTY_ROOT, EMPTY_ROOT, [])
    with pytest.raises(OutOfRange):
        consistency_plan(old, new)


@pytest.mark.parametrize("value", [True, 1.0, "3", None, b"\x03"])
def test_sizes_that_are_not_integers_are_out_of_range(value: object) -> None:
    with pytest.raises(OutOfRange):
        root_plan(value)  # type: ignore[arg-type]
    with pytest.raises(OutOfRange):
        verify_inclusion(LEAF, 0, value, [], LEAF)  # type: ignore[arg-type]


def test_a_million_hash_proof_is_refused_before_any_hashing() -> None:
    proof = [LEAF] * 1_000_000
    with pytest.raises(MalformedProof):
        verify_inclusion(LEAF, 3, 2**63, proof, LEAF)
    with pytest.raises(MalformedProof):
        verify_consistency(3, 2**63, LEAF, LEAF, proof)


@pytest.mark.parametrize(
    "proof", [[b"short"], [LEAF + b"x"], ["text" * 8], [None], b"\x00" * 32, "a proof"]
)
def test_proof_items_that_are_not_32_byte_hashes_are_malformed(proof: object) -> None:
    with pytest.raises(MalformedProof):
        verify_inclusion(LEAF, 0, 2, proof, LEAF)  # type: ignore[arg-type]
    with pytest.raises(MalformedProof):
        verify_consistency(1, 2, LEAF, LEAF, proof)  # type: ignore[arg-type]


def test_a_frontier_at_2_64_minus_1_leaves_is_full() -> None:
    frontier = AppendFrontier(2**64 - 1, [LEAF] * 64)
    with pytest.raises(OutOfRange):
        frontier.append([LEAF])
    with pytest.raises(OutOfRange):
        AppendFrontier(HUGE, [])


NOTE = TEXT + "\n" + PETER_SIG
# The signature's last base64 character carries two unused bits: setting one spells the same
# bytes another way, which Go's decoder accepts and this one refuses.
NON_CANONICAL = NOTE.replace("JnAM=\n", "JnAN=\n")


@pytest.mark.parametrize(
    "message",
    [
        NON_CANONICAL,
        NOTE.replace("JnAM=", "JnAM"),  # unpadded
        NOTE.replace("JnAM=", "JnAM=="),
        NOTE.replace("x08go/", "x08go_"),  # URL-safe alphabet
        NOTE.replace("— PeterNeumann x08go", "— PeterNeumann  x08go"),
        NOTE.replace("\u2014 ", "- "),
        NOTE.replace("PeterNeumann", "Peter\ud800Neumann"),  # a lone surrogate
        NOTE.encode().replace(b"Peter", b"Peter\xed\xa0\x80"),  # one encoded as UTF-8 (CESU)
        "\x00" + NOTE,
        NOTE.replace("problem,\n", "problem,\r\n"),
        NOTE.replace("\n\n", "\n \n"),
        TEXT + "\n" + "\u2014 PeterNeumann AAAA\n",  # a signature of fewer than 5 bytes
        "x" * (MAX_NOTE_BYTES + 1),
        b"x" * (4 * MAX_NOTE_BYTES),
        TEXT + "\n" + PETER_SIG * 5000,  # far too many signatures
        12345,
    ],
)
def test_malformed_notes_are_refused_as_malformed(message: str | bytes) -> None:
    with pytest.raises(MalformedNote):
        open_note(message, VerifierSet([peter()]))


def test_a_very_long_line_within_the_size_limit_is_read_once_and_judged() -> None:
    # 675,000 bytes of "signature" by key id 0: well-formed, by no known key.
    long_line = "\u2014 PeterNeumann " + "A" * 900_000 + "\n"
    with pytest.raises(UnverifiedNote):
        open_note(TEXT + "\n" + long_line, VerifierSet([peter()]))
    # The same line past the size limit is refused before anything is decoded.
    with pytest.raises(MalformedNote):
        open_note(TEXT + "\n" + long_line * 2, VerifierSet([peter()]))


def test_the_canonical_spelling_of_the_same_note_opens() -> None:
    assert open_note(NOTE, VerifierSet([peter()])).text == TEXT
    assert base64.b64decode(NON_CANONICAL.split()[-1]) == base64.b64decode(NOTE.split()[-1])


@pytest.mark.parametrize(
    "text",
    ["no final newline", "nul\x00\n", "lone \ud800 surrogate\n", "x" * (MAX_NOTE_BYTES + 1)],
)
def test_texts_no_note_can_carry_are_not_signed(text: str) -> None:
    with pytest.raises(MalformedNote):
        sign_note(text, [NoteSigner.from_skey(PETER_SKEY)])


def test_more_signers_than_a_note_may_carry_are_refused() -> None:
    signers = [NoteSigner(f"signer{n}", bytes([n]) * 32) for n in range(101)]
    with pytest.raises(MalformedNote):
        sign_note("text\n", signers)


@pytest.mark.parametrize(
    "text",
    [
        PETER_VKEY.replace("Neumann", "Neu\ud800mann"),
        PETER_VKEY.replace("Neumann", "Neu\x00mann"),
        PETER_VKEY.replace("c74f20a3", "C74F20A3"),  # the id is lowercase hex
        PETER_VKEY.replace("c74f20a3", "0xc74f20a"),
        PETER_VKEY.replace("c74f20a3", str(HUGE)),
        PETER_VKEY[:-1] + "X",  # non-canonical base64 of the same key
        PETER_VKEY + "=",
        PETER_VKEY + "\n",
        "PeterNeumann" * 100_000 + "+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "",
        "+" * 10,
    ],
)
def test_malformed_verifier_keys_are_refused(text: str) -> None:
    with pytest.raises(MalformedKey):
        NoteVerifier.from_vkey(text)


@pytest.mark.parametrize(
    "text",
    [
        PETER_SKEY.replace("PRIVATE+KEY", "private+key"),
        PETER_SKEY.replace("PeterNeumann", "Peter Neumann"),
        PETER_SKEY[:-1] + "0",  # another seed: the id no longer matches
        PETER_SKEY.replace("AYEK", "AoEK"),  # key type 0x02
        "PRIVATE+KEY+",
        None,
    ],
)
def test_malformed_signer_keys_are_refused(text: str) -> None:
    with pytest.raises(MalformedKey):
        NoteSigner.from_skey(text)


@pytest.mark.parametrize(
    ("origin", "size", "root"),
    [
        ("", 1, LEAF),
        ("two\nlines", 1, LEAF),
        ("nul\x00", 1, LEAF),
        ("lone \udfff", 1, LEAF),
        ("o", HUGE, LEAF),
        ("o", -1, LEAF),
        ("o", 1, b"short"),
        ("o", 1, "not bytes"),
    ],
)
def test_checkpoints_that_cannot_be_written_are_refused(
    origin: str, size: int, root: bytes
) -> None:
    with pytest.raises(MalformedCheckpoint):
        Checkpoint(origin, size, root)


def test_a_signed_note_that_is_no_checkpoint_is_refused_after_its_signature() -> None:
    with pytest.raises(MalformedCheckpoint):
        open_checkpoint(NOTE, VerifierSet([peter()]))


@PROPERTIES
@given(st.binary(max_size=400) | st.text(max_size=400))
def test_arbitrary_input_to_the_note_parsers_is_refused_with_a_typed_error(
    message: bytes | str,
) -> None:
    # Mixed into a real note so that some examples get past the first checks.
    for candidate in (message, NOTE[:200] + (message if isinstance(message, str) else "")):
        with contextlib.suppress(TransparencyError):
            open_checkpoint(candidate, VerifierSet([peter()]))
    text = message if isinstance(message, str) else message.decode("latin-1")
    for parse in (NoteVerifier.from_vkey, NoteSigner.from_skey, Checkpoint.parse):
        with contextlib.suppress(TransparencyError):
            parse(text)
