"""Checks on the settings that decide whose tokens are believed: a key an attacker can guess or
a key document an attacker can answer would let them sign as anyone."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

MIN_JWT_SECRET_BYTES = 32
"""The shortest HS256 secret accepted (RFC 7518 §3.2: a key as long as the hash output)."""


def jwt_secret_problem(secret: str) -> str | None:
    """Why an HS256 secret cannot be used (``None``: it can, or it is unset)."""
    # A short HMAC key is brute-forced offline from any one token, then signs any claims.
    if 0 < len(secret.encode()) < MIN_JWT_SECRET_BYTES:
        return (
            f"CONCLAVE_JWT_SECRET must be at least {MIN_JWT_SECRET_BYTES} bytes (RFC 7518 §3.2), "
            "e.g. the output of `openssl rand -base64 32`"
        )
    return None


def jwks_url_problem(url: str) -> str | None:
    """Why a JWKS URL cannot be used (``None``: it can): not absolute, or plain http to a host
    other than this one (whoever answers a plain http fetch picks the keys tokens verify with)."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return f"{url!r} must be an absolute https URL"
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        return f"{url!r} must use https (plain http only to a loopback host)"
    return None


def _is_loopback(host: str) -> bool:
    name = host.lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
