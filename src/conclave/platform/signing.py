"""HMAC-SHA256 request signatures: ``hex(HMAC(secret, "<sha256 of body>:<timestamp>[:<nonce>]"))``.

Used by the edge service to authenticate device uploads on top of bearer tokens. The timestamp is
Unix seconds; a request is accepted only inside a window around the server's clock, and the caller
stores each accepted signature (or nonce) to refuse replays within that window.
"""

from __future__ import annotations

import hashlib
import hmac

from conclave.platform.errors import Unauthorized


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
        raise Unauthorized("X-Conclave-Timestamp must be Unix seconds.", code="INVALID_SIGNATURE")
    if abs(now - int(timestamp)) > window_seconds:
        raise Unauthorized(
            "The request timestamp is outside the accepted window.", code="SIGNATURE_EXPIRED"
        )


def verify(
    secret: str, body_sha256: str, timestamp: str, signature: str, nonce: str | None = None
) -> None:
    """Raise :class:`Unauthorized` unless ``signature`` signs this body, time and nonce."""
    expected = sign(secret, body_sha256, timestamp, nonce)
    given = signature.strip().removeprefix("sha256=").lower()
    if not hmac.compare_digest(expected, given):
        raise Unauthorized("The request signature does not match.", code="INVALID_SIGNATURE")


def parse_secret_table(raw: str) -> dict[str, str]:
    """Parse ``device_id=secret,device2=secret2``; a malformed entry is a configuration error."""
    table: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        device, sep, secret = entry.partition("=")
        if not sep or not device.strip() or not secret.strip():
            raise ValueError("EDGE_DEVICE_SECRETS entries must look like 'device_id=secret'")
        table[device.strip()] = secret.strip()
    return table
