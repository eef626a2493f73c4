"""Standard base64 (RFC 4648 section 4) as the signed-note formats spell it, read strictly.

Only the canonical spelling of a value is accepted: padding present, no other character, and
the unused low bits of the last character zero. Go's decoder lets non-zero unused bits through,
so one signature or hash could be written several ways; refusing all but one means the text a
witness or auditor compares is the value itself.
"""

from __future__ import annotations

import base64
import binascii

from conclave.platform.transparency.errors import MalformedInput


def encode(data: bytes) -> str:
    """``data`` in standard, padded base64."""
    return base64.b64encode(data).decode("ascii")


def decode(text: str, what: str, error: type[MalformedInput] = MalformedInput) -> bytes:
    """The bytes whose canonical base64 is ``text``; ``error`` (naming ``what``) otherwise."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise error(f"{what} is not base64") from None
    if encode(data) != text:
        raise error(f"{what} is not canonical base64")
    return data
