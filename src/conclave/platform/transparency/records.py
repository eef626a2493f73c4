"""The typed records the transparency kit hands out: an opened note and its signatures."""

from __future__ import annotations

import base64
from dataclasses import dataclass

SIGNATURE_PREFIX = "\u2014 "
"""What starts a signature line: an em dash (U+2014) and a space."""


@dataclass(frozen=True, slots=True)
class NoteSignature:
    """One signature line: the key's name and id, and the signature proper."""

    name: str
    key_id: int
    signature: bytes

    def line(self) -> str:
        """The signature line, newline included."""
        data = base64.b64encode(self.key_id.to_bytes(4, "big") + self.signature).decode("ascii")
        return f"{SIGNATURE_PREFIX}{self.name} {data}\n"


@dataclass(frozen=True, slots=True)
class Note:
    """An opened note: its text, the signatures of known keys that verified, and the signatures
    of unknown keys (not checked, kept so that re-signing keeps them)."""

    text: str
    signatures: tuple[NoteSignature, ...]
    unverified: tuple[NoteSignature, ...] = ()
