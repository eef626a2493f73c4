"""HMAC-SHA256 request signatures: ``hex(HMAC(secret, "<sha256 of body>:<timestamp>:<nonce>"))``.

Used by the edge service to authenticate device uploads on top of bearer tokens. The timestamp is
Unix seconds; a request is accepted only inside a window around the server's clock, and the caller
stores each accepted canonical signature to refuse replays within that window.

A signature header has several spellings that verify alike (upper or lower case hex, with or
without a ``sha256=`` prefix, padded with spaces). :func:`canonical_signature` reduces them to one,
and both the check and the replay key use that one: keyed on the raw header, each spelling of one
captured request was a "new" request.
"""

from __future__ import annotations

import hashlib
import hmac
import re

from conclave.platform.errors import Unauthorized
from conclave.platform.problem_types import ProblemCode

_HEX_SIGNATURE = re.compile(r"^[0-9a-f]{64}\Z")
# A nonce is a client's random token (the SDK sends 32 hex digits); 16 characters is the least
# that can be random enough, and the store's replay column holds 128.
_NONCE = re.compile(r"^[A-Za-z0-9._~+/=-]{16,128}\Z")


def signing_message(body_sha256: str, timestamp: str, nonce: str | None = None) -> bytes:
    """The bytes that are signed."""
    message = f"{body_sha256}:{timestamp}"
    return (f"{message}:{nonce}" if nonce else message).encode()


def sign(secret: str, body_sha256: str, timestamp: str, nonce: str | None = None) -> str:
    """The hex signature a client sends in ``X-Conclave-Signature``."""
    message = signing_message(body_sha256, timestamp, nonce)
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def check_timestamp(timestamp: str | None, now: float, window_seconds: float) -> None:
    """Raise :class:`Unauthorized` unless ``timestamp`` is Unix seconds within the window."""
    # Headers arrive latin-1 decoded, and ``isdigit`` admits characters ``int`` refuses ("²").
    if not timestamp or not (timestamp.isascii() and timestamp.isdigit()) or len(timestamp) > 12:
        raise Unauthorized(
            "X-Conclave-Timestamp must be Unix seconds.", code=ProblemCode.INVALID_SIGNATURE
        )
    if abs(now - int(timestamp)) > window_seconds:
        raise Unauthorized(
            "The request timestamp is outside the accepted window.",
            code=ProblemCode.SIGNATURE_EXPIRED,
        )


def canonical_signature(header: str) -> str:
    """The one spelling of a signature header: 64 lower-case hex digits without a prefix.
    :class:`Unauthorized` (``INVALID_SIGNATURE``) when the header is not a SHA-256 HMAC at all."""
    text = header.strip().lower().removeprefix("sha256=")
    if not _HEX_SIGNATURE.match(text):
        raise Unauthorized(
            "X-Conclave-Signature must be 64 hex digits (optionally prefixed 'sha256=').",
            code=ProblemCode.INVALID_SIGNATURE,
        )
    return text


def check_nonce(nonce: str | None) -> str:
    """The request's nonce; :class:`Unauthorized` when it is missing (``NONCE_REQUIRED``) or is
    not 16-128 characters of ``A-Z a-z 0-9 . _ ~ + / = -`` (``INVALID_NONCE``)."""
    if not nonce:
        raise Unauthorized(
            "Signed uploads must carry a fresh X-Conclave-Nonce.", code=ProblemCode.NONCE_REQUIRED
        )
    if not _NONCE.match(nonce):
        raise Unauthorized(
            "X-Conclave-Nonce must be 16-128 characters of A-Z a-z 0-9 . _ ~ + / = -.",
            code=ProblemCode.INVALID_NONCE,
        )
    return nonce


def verify(
    secret: str, body_sha256: str, timestamp: str, signature: str, nonce: str | None = None
) -> None:
    """Raise :class:`Unauthorized` unless ``signature`` (canonical, from
    :func:`canonical_signature`) signs this body, time and nonce."""
    expected = sign(secret, body_sha256, timestamp, nonce)
    if not hmac.compare_digest(expected, signature):
        raise Unauthorized(
            "The request signature does not match.", code=ProblemCode.INVALID_SIGNATURE
        )


def parse_secret_table(raw: str) -> dict[str, str]:
    """Parse ``device_id=secret,device2=secret2``; a malformed entry is a configuration error."""
    table: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        device, sep, secret = entry.partition("=")
        if not sep or not device.strip() or not secret.strip():
            raise ValueError("EDGE_DEVICE_SECRETS entries must look like 'device_id=secret'")
        table[device.strip()] = secret.strip()
    return table
