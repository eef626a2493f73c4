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


def test_attack_jwks_url_over_plain_http_to_a_remote_host_is_accepted():
    """CONCLAVE_JWT_JWKS_URL=http://issuer.example.com/jwks is accepted (the validator allows
    ``http`` for any host): anyone on the network path between the gateway and the issuer
    answers the JWKS fetch with their own key and then signs tokens for any ``sub`` with
    ``roles: [operator]``. OAuth/OIDC require TLS for jwks_uri; loopback could stay allowed."""
    with pytest.raises(ValueError):
        test_settings(auth="enabled", jwt_jwks_url="http://issuer.example.com/jwks")


def test_attack_jwks_entries_with_private_parts_burn_cpu_on_the_event_loop():
    """``_usable_keys`` runs synchronously inside the async fetch (on the event loop) and builds a
    PyJWK for every entry; an RSA entry carrying a ``d`` that does not fit makes PyJWT try to
    recover the primes (~0.4 s per 4096-bit entry here) and, failing, the entry is skipped
    without counting towards MAX_KEYS. A 256 KiB document holds ~180 of them: ~70 s during which
    the gateway serves no one, again at every refetch (one per unknown-kid token and interval).
    (A JWK with private parts has no business in a JWKS; it could be refused before parsing.)"""
    import secrets
    import time

    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    good = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = RSAAlgorithm.to_jwk(good.public_key(), as_dict=True)
    big = rsa.generate_private_key(public_exponent=65537, key_size=4096)
    big_public = RSAAlgorithm.to_jwk(big.public_key(), as_dict=True)
    bad = [
        {**big_public, "kid": f"b{i}", "d": _b64(secrets.randbits(4095) | 1)} for i in range(8)
    ]
    started = time.perf_counter()
    _usable_keys({"keys": [*bad, {**public, "kid": "k1"}]})
    took = time.perf_counter() - started
    assert took < 0.5, f"8 JWKS entries took {took:.1f} s of synchronous CPU"
