"""Regression tests from an attack on token checking: weak keys and key sources the gateway
accepted. Each docstring says what is guarded now, then what the attack found before."""

from __future__ import annotations

import base64

import pytest

from conclave.platform.jwks import _usable_keys
from tests.conftest import test_settings


def _b64(number: int) -> str:
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_rsa_keys_under_2048_bits_are_skipped():
    """Guarded: RSA keys under 2048 bits are skipped.

    Before: A JWKS entry with a 512-bit RSA modulus (factorable with public tools in hours) is
    kept as a signing key; whoever factors it signs any ``sub`` and ``roles`` they like. RFC
    7518 §3.3 requires 2048 bits; nothing in jwks._usable_keys checks a key's size."""
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


def test_an_hs256_secret_under_32_bytes_stops_the_start():
    """Guarded: a secret under 32 bytes is a settings error.

    Before: CONCLAVE_JWT_SECRET='x' starts a gateway with auth on: a one-byte HMAC key that any
    token (HS256 tokens are signed with it) lets an attacker brute-force offline in
    microseconds, then mint tokens for any user with ``roles: [operator]``. PyJWT only warns
    (InsecureKeyLengthWarning, RFC 7518 §3.2 asks for >= 32 bytes)."""
    with pytest.raises(ValueError):
        test_settings(auth="enabled", jwt_secret="x")


def test_a_plain_http_jwks_url_to_a_remote_host_stops_the_start():
    """Guarded: only https, or plain http to loopback, is accepted.

    Before: CONCLAVE_JWT_JWKS_URL=http://issuer.example.com/jwks is accepted (the validator
    allows ``http`` for any host): anyone on the network path between the gateway and the issuer
    answers the JWKS fetch with their own key and then signs tokens for any ``sub`` with
    ``roles: [operator]``. OAuth/OIDC require TLS for jwks_uri; loopback could stay allowed."""
    with pytest.raises(ValueError):
        test_settings(auth="enabled", jwt_jwks_url="http://issuer.example.com/jwks")


def test_entries_with_private_parts_are_skipped_before_costly_parsing():
    """Guarded: private entries are skipped unparsed; parsing runs off the loop.

    Before: ``_usable_keys`` runs synchronously inside the async fetch (on the event loop) and
    builds a PyJWK for every entry; an RSA entry carrying a ``d`` that does not fit makes PyJWT
    try to recover the primes (~0.4 s per 4096-bit entry here) and, failing, the entry is
    skipped without counting towards MAX_KEYS. A 256 KiB document holds ~180 of them: ~70 s
    during which the gateway serves no one, again at every refetch (one per unknown-kid token
    and interval). (A JWK with private parts has no business in a JWKS; it could be refused
    before parsing.)"""
    import secrets
    import time

    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    good = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = RSAAlgorithm.to_jwk(good.public_key(), as_dict=True)
    big = rsa.generate_private_key(public_exponent=65537, key_size=4096)
    big_public = RSAAlgorithm.to_jwk(big.public_key(), as_dict=True)
    bad = [{**big_public, "kid": f"b{i}", "d": _b64(secrets.randbits(4095) | 1)} for i in range(8)]
    # This thread's CPU time: the work that would hold the loop, not waits for a core.
    started = time.thread_time()
    _usable_keys({"keys": [*bad, {**public, "kid": "k1"}]})
    took = time.thread_time() - started
    assert took < 0.5, f"8 JWKS entries took {took:.1f} s of synchronous CPU"


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080/jwks", "http://localhost/jwks", "http://[::1]/jwks"]
)
def test_a_plain_http_jwks_url_to_loopback_and_a_32_byte_secret_are_accepted(url: str):
    """The bounds refuse only what they must: a sidecar issuer on loopback, a 32-byte secret."""
    settings = test_settings(
        auth="enabled", jwt_jwks_url=url, jwt_audience="https://gateway.example/mcp"
    )
    assert settings.jwt_jwks_url == url
    assert test_settings(auth="enabled", jwt_secret="s" * 32).auth_active()


def test_a_jwks_url_without_an_audience_stops_the_start():
    with pytest.raises(ValueError, match="CONCLAVE_JWT_AUDIENCE"):
        test_settings(auth="enabled", jwt_jwks_url="https://issuer.example.com/jwks")
