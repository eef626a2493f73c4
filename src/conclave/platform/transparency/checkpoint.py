"""Checkpoints (C2SP tlog-checkpoint): a log's signed tree head as a signed note.

The note text is, one line each and every line ending in a newline::

    <origin>                 the log's identity, non-empty
    <tree size>              ASCII decimal, no leading zero (``0`` for the empty tree)
    <root hash>              standard base64 of the 32-byte RFC 9162 root
    [<extension line>...]    optional, opaque, non-empty

Both :meth:`Checkpoint.text` and :meth:`Checkpoint.parse` hold to exactly that, so a checkpoint
has one spelling: a witness, a mirror or an auditor comparing two checkpoints compares text. The
log signs with a key named after its origin (C2SP: the key name SHOULD match the origin), which is
what a witness expects when it cosigns (C2SP tlog-cosignature); signatures by other keys (a
witness's, a rotated key's) ride along and are ignored by a reader that does not know them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from conclave.platform.transparency import base64text
from conclave.platform.transparency.errors import (
    MalformedCheckpoint,
    MalformedInput,
    MalformedProof,
    RootMismatch,
    UnexpectedOrigin,
)
from conclave.platform.transparency.hashing import (
    EMPTY_ROOT,
    MAX_TREE_SIZE,
    check_hash,
    check_tree_size,
)
from conclave.platform.transparency.note import VerifierSet, check_note_text, open_note, sign_note
from conclave.platform.transparency.note_keys import Signer
from conclave.platform.transparency.records import Note, NoteSignature
from conclave.platform.transparency.verify import verify_consistency

# "0", or a decimal without a leading zero of at most the digits of 2^64 - 1: checked before the
# conversion, so a size of 10^400 digits is refused without being converted.
_TREE_SIZE = re.compile(r"0|[1-9][0-9]{0,19}")
_CONTROL = re.compile(r"[\x00-\x1f]")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A log's tree head: its origin, tree size and root hash, and any extension lines."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_line(self.origin, "the origin")
        try:
            check_tree_size(self.size)
            check_hash(self.root_hash, "the root hash")
        except MalformedInput as error:
            raise MalformedCheckpoint(str(error)) from None
        if not isinstance(self.extensions, tuple):
            raise MalformedCheckpoint("extension lines are a tuple of strings")
        for line in self.extensions:
            _check_line(line, "an extension line")

    def text(self) -> str:
        """The note text of the checkpoint (what is signed)."""
        lines = [self.origin, str(self.size), base64text.encode(self.root_hash), *self.extensions]
        return "".join(f"{line}\n" for line in lines)

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """The checkpoint whose note text is ``text``; :class:`MalformedCheckpoint` unless it is
        spelt exactly as :meth:`text` would spell it."""
        if not isinstance(text, str) or not text.endswith("\n"):
            raise MalformedCheckpoint("a checkpoint's lines each end with a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise MalformedCheckpoint("a checkpoint has an origin, a tree size and a root hash")
        origin, size_text, root_text, *extensions = lines
        if not _TREE_SIZE.fullmatch(size_text):
            raise MalformedCheckpoint(
                "the tree size is a decimal from 0 to 2^64 - 1 without leading zeros"
            )
        size = int(size_text)
        if size > MAX_TREE_SIZE:
            raise MalformedCheckpoint("the tree size is at most 2^64 - 1")
        root_hash = base64text.decode(root_text, "the root hash", MalformedCheckpoint)
        return cls(origin, size, root_hash, tuple(extensions))


@dataclass(frozen=True, slots=True)
class SignedCheckpoint:
    """An opened checkpoint and the note it came in (its verified and unknown signatures)."""

    checkpoint: Checkpoint
    note: Note


def _check_line(line: object, what: str) -> None:
    if not isinstance(line, str) or not line:
        raise MalformedCheckpoint(f"{what} is a non-empty line")
    if _CONTROL.search(line):
        raise MalformedCheckpoint(f"{what} holds no newline or control character")
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedCheckpoint(f"{what} is valid UTF-8 (no lone surrogate)") from None


def sign_checkpoint(
    checkpoint: Checkpoint, signer: Signer, *, keep: Iterable[NoteSignature] = ()
) -> bytes:
    """The signed note of ``checkpoint``, signed by the log's key, whose name must be the
    origin (so that the verifier key a reader holds names the log it checks)."""
    if signer.name != checkpoint.origin:
        raise MalformedCheckpoint(
            f"the log's key is named {signer.name!r}, not after the origin {checkpoint.origin!r}"
        )
    return sign_note(check_note_text(checkpoint.text()), [signer], keep=keep)


def open_checkpoint(
    message: bytes | str, verifiers: VerifierSet, *, origin: str | None = None
) -> SignedCheckpoint:
    """Open a signed checkpoint with the log's verifier keys, and parse it.

    The errors of :func:`open_note`, then :class:`MalformedCheckpoint` for a text that is not a
    checkpoint, and :class:`UnexpectedOrigin` when ``origin`` is given and differs."""
    note = open_note(message, verifiers)
    checkpoint = Checkpoint.parse(note.text)
    if origin is not None and checkpoint.origin != origin:
        raise UnexpectedOrigin(f"the checkpoint is of {checkpoint.origin!r}, not {origin!r}")
    return SignedCheckpoint(checkpoint, note)


def verify_extension(old: Checkpoint, new: Checkpoint, proof: Sequence[bytes]) -> None:
    """Check that ``new`` extends ``old``, two checkpoints of one log, with the consistency proof
    between their sizes; raise if it does not, which means the log forked: two checkpoints of one
    size with different roots, or a newer tree that does not hold the older one (both
    :class:`RootMismatch`).

    Both checkpoints must already be opened with the log's keys (:func:`open_checkpoint`): a
    fork is two histories *signed* by the log. :class:`UnexpectedOrigin` for checkpoints of two
    logs; :class:`OutOfRange` when ``new`` is smaller than ``old``. From the empty tree the proof
    is empty (every tree extends it, RFC 9162 defines no proof)."""
    if old.origin != new.origin:
        raise UnexpectedOrigin(f"checkpoints of two logs: {old.origin!r} and {new.origin!r}")
    if old.size == 0:
        if old.root_hash != EMPTY_ROOT or (new.size == 0 and new.root_hash != EMPTY_ROOT):
            raise RootMismatch("a checkpoint of the empty tree with another root")
        if isinstance(proof, bytes | str) or not isinstance(proof, Sequence) or proof:
            raise MalformedProof("the proof from the empty tree is an empty sequence")
        return
    verify_consistency(old.size, new.size, old.root_hash, new.root_hash, proof)
