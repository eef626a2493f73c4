"""Weak keys the gateway's token checking accepts (attack-auth)."""

from __future__ import annotations

import base64

import pytest

from conclave.platform.jwks import _usable_keys
from tests.conftest import test_settings


def _b64(number: int) -> str:
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_attack_jwks_keeps_a_512_bit_rsa_key():
    """A JWKS entry with a 512-bit RSA modulus (factorable with public tools in hours) is kept as a
    signing key; whoever factors it signs any ``sub`` and ``roles`` they like. RFC 7518 §3.3
    requires 2048 bits; nothing in jwks._usable_keys checks a key's size."""
    sympy = pytest.importorskip("sympy")
    p = sympy.randprime(2**255, 2**256)
    q = sympy.randprime(2**255, 2**256)
    jwk = {"kty": "RSA", "kid": "weak", "use": "sig", "n": _b64(p * q), "e": _b64(65537)}
    strong = {"kty": "RSA", "kid": "x", "use": "sig", "n": _b64(2**2047 + 1 | 1), "e": "AQAB"}
    try:
        kept = _usable_keys({"keys": [jwk, strong]})
    except ValueError:
        return
    assert "weak" not in kept, "a 512-bit RSA key verifies tokens"


def test_attack_a_one_byte_hs256_secret_is_accepted():
    """CONCLAVE_JWT_SECRET='x' starts a gateway with auth on: a one-byte HMAC key that any token
    (HS256 tokens are signed with it) lets an attacker brute-force offline in microseconds, then
    mint tokens for any user with ``roles: [operator]``. PyJWT only warns
    (InsecureKeyLengthWarning, RFC 7518 §3.2 asks for >= 32 bytes)."""
    with pytest.raises(ValueError):
        test_settings(auth="enabled", jwt_secret="x")
