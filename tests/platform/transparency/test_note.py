"""Signed notes and their keys, against Go's ``golang.org/x/mod/sumdb/note`` test vectors
(``note_test.go``: the PeterNeumann and EnochRoot keys, the note and its signatures) and the
example of C2SP signed-note. Ed25519 is deterministic, so signatures are compared byte for byte.
"""

from __future__ import annotations

import pytest

from conclave.platform.transparency import (
    InvalidSignature,
    MalformedKey,
    MalformedNote,
    NoteSignature,
    NoteSigner,
    NoteVerifier,
    UnverifiedNote,
    VerifierSet,
    generate_key,
    open_note,
    sign_note,
)
from conclave.platform.transparency.note import MAX_SIGNATURES

PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_SIG = (
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngot"
    "pRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWL"
    "ox33WWd1RvMc+QQ=\n"
)
# C2SP signed-note's example.
C2SP_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = (
    "This is an example message.\n\n\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfX"
    "ppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)


def peter() -> NoteVerifier:
    return NoteVerifier.from_vkey(PETER_VKEY)


def enoch() -> NoteVerifier:
    return NoteVerifier.from_vkey(ENOCH_VKEY)


def test_gos_signer_key_signs_byte_for_byte_as_go_does() -> None:
    signer = NoteSigner.from_skey(PETER_SKEY)
    assert (signer.name, signer.key_id) == ("PeterNeumann", 0xC74F20A3)
    assert signer.verifier.vkey == PETER_VKEY
    assert signer.skey() == PETER_SKEY
    assert sign_note(TEXT, [signer]) == (TEXT + "\n" + PETER_SIG).encode()


def test_re_signing_replaces_the_signers_old_signature() -> None:
    # Go's TestSign: an existing signature by the same key is replaced, not repeated.
    signer = NoteSigner.from_skey(PETER_SKEY)
    stale = NoteSignature("PeterNeumann", 0xC74F20A3, b"BADSIGN")
    assert sign_note(TEXT, [signer], keep=[stale]) == (TEXT + "\n" + PETER_SIG).encode()


def test_a_second_signer_adds_its_line_after_the_kept_ones() -> None:
    opened = open_note(TEXT + "\n" + PETER_SIG, VerifierSet([peter()]))
    witness = NoteSigner(name="witness.example/w1", seed=bytes(range(32)))
    signed = sign_note(opened.text, [witness], keep=opened.signatures)
    assert signed.decode().startswith(TEXT + "\n" + PETER_SIG + "\u2014 witness.example/w1 ")
    both = open_note(signed, VerifierSet([peter(), witness.verifier]))
    assert [s.name for s in both.signatures] == ["PeterNeumann", "witness.example/w1"]


def test_open_keeps_unknown_signatures_unverified() -> None:
    note = open_note((TEXT + "\n" + PETER_SIG + ENOCH_SIG).encode(), VerifierSet([peter()]))
    assert note.text == TEXT
    assert [(s.name, s.key_id) for s in note.signatures] == [("PeterNeumann", 0xC74F20A3)]
    assert [(s.name, s.key_id) for s in note.unverified] == [("EnochRoot", 0xAF0CFE78)]
    both = open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, VerifierSet([peter(), enoch()]))
    assert [s.name for s in both.signatures] == ["PeterNeumann", "EnochRoot"]
    assert both.unverified == ()


def test_a_note_no_known_key_signed_is_refused_with_what_was_read() -> None:
    with pytest.raises(UnverifiedNote) as refused:
        open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, VerifierSet([]))
    assert [s.name for s in refused.value.note.unverified] == ["PeterNeumann", "EnochRoot"]


def test_the_c2sp_example_verifies() -> None:
    note = open_note(C2SP_NOTE, VerifierSet([NoteVerifier.from_vkey(C2SP_VKEY)]))
    assert note.text == "This is an example message.\n"


def test_a_bad_signature_by_a_known_key_refuses_the_whole_note() -> None:
    forged = PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    with pytest.raises(InvalidSignature) as refused:
        open_note(TEXT + "\n" + forged, VerifierSet([peter()]))
    assert (refused.value.name, refused.value.key_id) == ("PeterNeumann", 0xC74F20A3)
    # A valid copy first does not excuse an invalid one after it (C2SP: MUST verify).
    with pytest.raises(InvalidSignature):
        open_note(TEXT + "\n" + PETER_SIG + forged, VerifierSet([peter()]))
    # Nor does a change of the text.
    with pytest.raises(InvalidSignature):
        open_note(TEXT.replace("problem", "Problem") + "\n" + PETER_SIG, VerifierSet([peter()]))


def test_a_malformed_line_is_reported_as_such_whatever_signatures_come_before() -> None:
    forged = PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    with pytest.raises(MalformedNote):
        open_note(TEXT + "\n" + forged + "not a signature line\n", VerifierSet([peter()]))


def test_repeated_signatures_are_kept_once() -> None:
    enoch_altered = ENOCH_SIG[:60] + "ABCD" + ENOCH_SIG[60:]
    message = TEXT + "\n" + PETER_SIG + PETER_SIG + ENOCH_SIG + ENOCH_SIG + enoch_altered
    note = open_note(message, VerifierSet([peter()]))
    assert len(note.signatures) == 1
    # Go's case: the two distinct unknown lines are both kept, the repeated one once.
    assert len(note.unverified) == 2


def test_at_most_100_signatures() -> None:
    assert MAX_SIGNATURES == 100
    open_note(TEXT + "\n" + PETER_SIG * 100, VerifierSet([peter()]))
    for known in ([peter()], []):
        with pytest.raises(MalformedNote):
            open_note(TEXT + "\n" + PETER_SIG * 101, VerifierSet(known))


@pytest.mark.parametrize(
    "message",
    [
        TEXT,
        TEXT + "\n",
        TEXT + "\n" + PETER_SIG[:-1],
        "\x01" + TEXT + "\n" + PETER_SIG,
        b"\xff" + (TEXT + "\n" + PETER_SIG).encode(),
        TEXT + "\n" + "\u2014 Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2p"
        "ZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=",
        TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
    ],
)
def test_gos_malformed_notes_are_malformed(message: str | bytes) -> None:
    with pytest.raises(MalformedNote):
        open_note(message, VerifierSet([peter()]))


def test_verifier_keys_round_trip_and_gos_manglings_are_refused() -> None:
    # Go's TestNewVerifier: every proper substring and every one-byte change is refused.
    assert peter().vkey == PETER_VKEY
    for start in range(len(PETER_VKEY)):
        for end in range(start + 1, len(PETER_VKEY) + 1):
            if (start, end) != (0, len(PETER_VKEY)):
                with pytest.raises(MalformedKey):
                    NoteVerifier.from_vkey(PETER_VKEY[start:end])
    for position in range(len(PETER_VKEY)):
        changed = PETER_VKEY[:position] + chr(ord(PETER_VKEY[position]) + 1)
        with pytest.raises(MalformedKey):
            NoteVerifier.from_vkey(changed + PETER_VKEY[position + 1 :])
    # A key of the wrong length and one of an unknown type, each with a matching id.
    with pytest.raises(MalformedKey):
        NoteVerifier.from_vkey(
            "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY=="
        )
    with pytest.raises(MalformedKey):
        NoteVerifier.from_vkey("PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")


def test_signer_keys_round_trip_and_gos_manglings_are_refused() -> None:
    for start in range(len(PETER_SKEY)):
        for end in range(start + 1, len(PETER_SKEY) + 1):
            if (start, end) != (0, len(PETER_SKEY)):
                with pytest.raises(MalformedKey):
                    NoteSigner.from_skey(PETER_SKEY[start:end])
    for position in range(len(PETER_SKEY)):
        changed = PETER_SKEY[:position] + chr(ord(PETER_SKEY[position]) + 1)
        with pytest.raises(MalformedKey):
            NoteSigner.from_skey(changed + PETER_SKEY[position + 1 :])


def test_generated_keys_work_together_and_hide_the_secret() -> None:
    skey, vkey = generate_key("log.example/evidence")
    signer, verifier = NoteSigner.from_skey(skey), NoteVerifier.from_vkey(vkey)
    assert skey.startswith("PRIVATE+KEY+log.example/evidence+")
    assert signer.verifier == verifier
    assert signer.skey() not in repr(signer)
    # PRIVATE+KEY+<name>+<key id>+<base64 key>: the key's base64 may itself hold '+'.
    assert skey.split("+", 4)[4] not in repr(signer)
    note = open_note(sign_note("hello\n", [signer]), VerifierSet([verifier]))
    assert note.text == "hello\n"
    assert generate_key("log.example/evidence") != (skey, vkey)


class AcceptAnything:
    """A verifier that claims Peter's name and id (a key id is only 32 bits: one can be forged
    to collide) and accepts every signature."""

    name = "PeterNeumann"
    key_id = 0xC74F20A3

    def verify(self, message: bytes, signature: bytes) -> bool:
        return True


def test_two_different_keys_under_one_name_and_id_are_refused() -> None:
    with pytest.raises(MalformedKey):
        VerifierSet([peter(), AcceptAnything()])
    assert len(VerifierSet([peter(), peter()])) == 1


@pytest.mark.parametrize(
    "name", ["", "a b", "a+b", "tab\there", "nbsp\u00a0", "ideographic\u3000space", "nul\x00"]
)
def test_key_names_with_spaces_pluses_or_controls_are_refused(name: str) -> None:
    with pytest.raises(MalformedKey):
        NoteSigner(name, bytes(32))
