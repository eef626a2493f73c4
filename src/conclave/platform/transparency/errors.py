"""The errors of the transparency kit: one small hierarchy, so a caller tells apart input that is
not even shaped right, a check that failed, and a hash that storage does not hold.

They do not derive from :class:`conclave.platform.errors.ConclaveError` on purpose: this layer
runs with no server too (the offline verifier, the SDK), where an HTTP status means nothing. A
service that answers with one of them maps it to a problem code where it catches it.
"""

from __future__ import annotations

from conclave.platform.transparency.records import Note


class TransparencyError(Exception):
    """Base of every error raised by :mod:`conclave.platform.transparency`."""


class MalformedInput(TransparencyError, ValueError):
    """Bytes, text or numbers that do not have the shape the format requires."""


class OutOfRange(MalformedInput):
    """A leaf index or tree size outside what the tree or RFC 9162 allows (an index at or beyond
    the tree size, a size above 2^64 - 1, a consistency proof from an empty tree)."""


class MalformedProof(MalformedInput):
    """A proof of the wrong length, or a hash in it that is not 32 bytes."""


class MalformedKey(MalformedInput):
    """A signer or verifier key whose text is not of the C2SP signed-note form."""


class MalformedNote(MalformedInput):
    """A signed note that breaks a rule of C2SP signed-note (encoding, control characters, layout,
    size, number of signatures, signature line syntax)."""


class MalformedCheckpoint(MalformedInput):
    """A note text that is not a C2SP tlog-checkpoint body."""


class VerificationFailed(TransparencyError):
    """Well-formed input whose check failed: the claim it makes is not proven."""


class ClaimUnprovable(VerificationFailed):
    """A well-formed receipt or bundle whose numbers cannot prove what it claims: a leaf index at
    or beyond its checkpoint's size, a proof of the wrong length for its sizes, a newer
    checkpoint smaller than the older one (a rollback). The document reads fine; its claim does
    not hold, as for a proof that leads to another root."""


class RootMismatch(VerificationFailed):
    """A proof that does not lead to the root hash it was checked against."""


class InvalidSignature(VerificationFailed):
    """A signature by a known key that does not verify: the whole note is refused (C2SP
    signed-note: a client SHOULD reject it)."""

    def __init__(self, name: str, key_id: int) -> None:
        super().__init__(f"invalid signature by the known key {name}+{key_id:08x}")
        self.name = name
        self.key_id = key_id


class UnverifiedNote(VerificationFailed):
    """A well-formed note that no known key has signed (C2SP signed-note: MUST be rejected).

    ``note`` is what was parsed, untrusted: its unknown signatures tell which keys did sign."""

    def __init__(self, detail: str, note: Note) -> None:
        super().__init__(detail)
        self.note = note


class UnexpectedOrigin(VerificationFailed):
    """A checkpoint whose origin line is not the log it was expected from."""


class SubtreeNotStored(TransparencyError, LookupError):
    """A hash source was asked for a complete subtree it does not hold (beyond its tree size)."""
