"""Signed notes (C2SP signed-note, as Go's ``golang.org/x/mod/sumdb/note`` writes them).

A signed note is a text ending in a newline, a blank line, then one or more signature lines
``— <key name> <base64(4-byte key id || signature)>`` (an em dash U+2014 and a space first). The
signature covers the text, final newline included, blank line excluded. The whole note is UTF-8
with no ASCII control character but the newline.

Opening a note (:func:`open_note`) checks every rule before any signature: at most
:data:`MAX_NOTE_BYTES` bytes (checked before decoding) and :data:`MAX_SIGNATURES` signature lines,
so a hostile note costs at most a bounded decode, one scan and 100 Ed25519 verifications.
Signatures by keys the caller does not know are kept but not trusted (a witness's cosignature, a
rotated key's); every signature by a known key must verify, and at least one must be there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from conclave.platform.transparency import base64text
from conclave.platform.transparency.errors import (
    InvalidSignature,
    MalformedKey,
    MalformedNote,
    UnverifiedNote,
)
from conclave.platform.transparency.note_keys import Signer, Verifier, is_valid_key_name
from conclave.platform.transparency.records import SIGNATURE_PREFIX, Note, NoteSignature

MAX_NOTE_BYTES = 1 << 20
"""The largest signed note opened or produced, in bytes. C2SP asks verifiers to accept at least
16 signatures, which with post-quantum signatures (nearly 5 kB each) is about 110 kB."""

MAX_SIGNATURES = 100
"""The most signature lines a note may carry (Go's limit)."""

_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")


class VerifierSet:
    """The keys a reader trusts, found by ``(name, key id)``.

    Two different keys with the same name and id are refused here, once, rather than letting the
    one that happens to win decide a note's fate."""

    __slots__ = ("_by_id",)

    def __init__(self, verifiers: Iterable[Verifier]) -> None:
        self._by_id: dict[tuple[str, int], Verifier] = {}
        for verifier in verifiers:
            known = self._by_id.setdefault((verifier.name, verifier.key_id), verifier)
            if known is not verifier and known != verifier:
                raise MalformedKey(
                    f"two different keys are named {verifier.name}+{verifier.key_id:08x}"
                )

    def find(self, name: str, key_id: int) -> Verifier | None:
        """The known key of that name and id, if any."""
        return self._by_id.get((name, key_id))

    def __len__(self) -> int:
        return len(self._by_id)


def check_note_text(text: object) -> str:
    """``text`` if it can be a note's text: a string ending in a newline, valid UTF-8, without
    control characters but newlines; :class:`MalformedNote` otherwise."""
    if not isinstance(text, str) or not text.endswith("\n"):
        raise MalformedNote("a note text ends with a newline")
    if len(text) > MAX_NOTE_BYTES:
        raise MalformedNote(f"a signed note is at most {MAX_NOTE_BYTES} bytes")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedNote("a note text is valid UTF-8 (no lone surrogate)") from None
    if _CONTROL.search(text):
        raise MalformedNote("a note holds no control character but newlines")
    return text


def sign_note(text: str, signers: Sequence[Signer], *, keep: Iterable[NoteSignature] = ()) -> bytes:
    """The signed note of ``text`` with a signature by each of ``signers``.

    ``keep`` are signatures already on the note (a witness adds its cosignature to the log's
    signature this way); they come first, as they are (not verified again), except one by a key
    that signs again now."""
    check_note_text(text)
    message = text.encode("utf-8")
    signing = {(signer.name, signer.key_id) for signer in signers}
    lines = []
    for kept in keep:
        if not is_valid_key_name(kept.name) or not 0 <= kept.key_id < 2**32:
            raise MalformedNote("a kept signature has an invalid key name or id")
        if (kept.name, kept.key_id) not in signing:
            lines.append(kept.line())
    for signer in signers:
        if not is_valid_key_name(signer.name):
            raise MalformedKey("a signer's name is non-empty without space, '+' or control")
        lines.append(NoteSignature(signer.name, signer.key_id, signer.sign(message)).line())
    if not lines:
        raise MalformedNote("a signed note has at least one signature")
    if len(lines) > MAX_SIGNATURES:
        raise MalformedNote(f"a note carries at most {MAX_SIGNATURES} signatures")
    note = message + b"\n" + "".join(lines).encode("utf-8")
    if len(note) > MAX_NOTE_BYTES:
        raise MalformedNote(f"a signed note is at most {MAX_NOTE_BYTES} bytes")
    return note


def open_note(message: bytes | str, verifiers: VerifierSet) -> Note:
    """Parse ``message`` and check its signatures against ``verifiers``.

    :class:`MalformedNote` when it breaks a rule of the format; :class:`InvalidSignature` when a
    known key's signature does not verify; :class:`UnverifiedNote` when no known key signed it."""
    text = _decoded(message)
    if _CONTROL.search(text):
        raise MalformedNote("a note holds no control character but newlines")
    split = text.rfind("\n\n")
    if split < 0:
        raise MalformedNote("a signed note has a blank line before its signatures")
    body, block = text[: split + 1], text[split + 2 :]
    if not block.endswith("\n"):
        raise MalformedNote("a signed note ends with a signature line and a newline")
    if block.count("\n") > MAX_SIGNATURES:
        raise MalformedNote(f"a note carries at most {MAX_SIGNATURES} signatures")
    message_bytes = body.encode("utf-8")
    verified: dict[tuple[str, int], NoteSignature] = {}
    unverified: dict[str, NoteSignature] = {}
    # Every line is parsed before any signature is checked: a malformed note is refused as such.
    lines = block[:-1].split("\n")
    signatures = [_parse_signature_line(line) for line in lines]
    for line, signature in zip(lines, signatures, strict=True):
        verifier = verifiers.find(signature.name, signature.key_id)
        if verifier is None:
            unverified.setdefault(line, signature)
            continue
        # C2SP: a signature by a known key MUST be verified, and one that fails condemns the
        # note; so is a second copy, even though the first already verified.
        if not verifier.verify(message_bytes, signature.signature):
            raise InvalidSignature(signature.name, signature.key_id)
        verified.setdefault((signature.name, signature.key_id), signature)
    note = Note(body, tuple(verified.values()), tuple(unverified.values()))
    if not verified:
        raise UnverifiedNote("no known key signed the note", note)
    return note


def _decoded(message: bytes | str) -> str:
    if isinstance(message, str):
        if len(message) > MAX_NOTE_BYTES:
            raise MalformedNote(f"a signed note is at most {MAX_NOTE_BYTES} bytes")
        try:
            message = message.encode("utf-8")
        except UnicodeEncodeError:
            raise MalformedNote("a signed note is valid UTF-8 (no lone surrogate)") from None
    if not isinstance(message, bytes):
        raise MalformedNote("a signed note is bytes or text")
    if len(message) > MAX_NOTE_BYTES:
        raise MalformedNote(f"a signed note is at most {MAX_NOTE_BYTES} bytes")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedNote("a signed note is valid UTF-8") from None


def _parse_signature_line(line: str) -> NoteSignature:
    if not line.startswith(SIGNATURE_PREFIX):
        raise MalformedNote("a signature line starts with an em dash and a space")
    name, space, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
    if not space or not is_valid_key_name(name):
        raise MalformedNote("a signature line names a key without space or '+'")
    data = base64text.decode(encoded, "a note signature", MalformedNote)
    if len(data) < 5:
        raise MalformedNote("a note signature has a key id and at least one byte")
    return NoteSignature(name, int.from_bytes(data[:4], "big"), data[4:])
