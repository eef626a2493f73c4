"""Bearer tokens and JWTs become a principal; every bad credential is a 401 with a stable code."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from conclave.platform.auth import AuthConfig, Authenticator, Principal, parse_token_table
from conclave.platform.errors import Unauthorized

SECRET = "a-test-secret-that-is-at-least-32-bytes-long"


def authenticator(**config: Any) -> Authenticator:
    values: dict[str, Any] = {"enabled": True, "tokens": {}}
    values.update(config)
    return Authenticator(AuthConfig(**values))


def hs256(claims: dict[str, Any], secret: str = SECRET) -> str:
    return jwt.encode({"sub": "alice", "exp": int(time.time()) + 3600, **claims}, secret, "HS256")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def refused(auth: Authenticator, header: str | None) -> str:
    with pytest.raises(Unauthorized) as caught:
        auth.authenticate(header)
    assert caught.value.status == 401
    assert caught.value.headers["WWW-Authenticate"].startswith("Bearer")
    return caught.value.code


@pytest.fixture(scope="module")
def rsa_keys() -> tuple[bytes, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public.decode()


def test_static_token_maps_to_its_user() -> None:
    auth = authenticator(tokens={"tok-1": "alice", "tok-2": "bob"})
    assert auth.authenticate("Bearer tok-2") == Principal("bob", "token")
    assert auth.authenticate("bearer   tok-1") == Principal("alice", "token")


def test_wrong_token_is_invalid() -> None:
    assert refused(authenticator(tokens={"tok-1": "alice"}), "Bearer tok-11") == "INVALID_TOKEN"


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer   ", "Basic dXNlcjpwYXNz", "tok-1"])
def test_missing_or_malformed_header_is_unauthorized(header: str | None) -> None:
    assert refused(authenticator(tokens={"tok-1": "alice"}), header) == "UNAUTHORIZED"


def test_hs256_jwt_gives_its_subject() -> None:
    auth = authenticator(jwt_secret=SECRET)
    assert auth.authenticate(f"Bearer {hs256({})}") == Principal("alice", "jwt")


@pytest.mark.parametrize(
    ("token", "code"),
    [
        (hs256({"exp": int(time.time()) - 60}), "TOKEN_EXPIRED"),
        (hs256({}, secret="another-secret-that-is-also-32-bytes-long"), "INVALID_TOKEN"),
        (jwt.encode({"sub": "alice"}, SECRET, "HS256"), "INVALID_TOKEN"),  # no exp
        (hs256({"sub": ""}), "INVALID_TOKEN"),
        (jwt.encode({"sub": "alice", "exp": 2**40}, None, "none"), "INVALID_TOKEN"),
        ("not.a.jwt", "INVALID_TOKEN"),
    ],
    ids=["expired", "wrong-signature", "no-exp", "empty-sub", "alg-none", "garbage"],
)
def test_bad_jwts_are_refused(token: str, code: str) -> None:
    assert refused(authenticator(jwt_secret=SECRET), f"Bearer {token}") == code


def test_rs256_jwt_verified_with_the_public_key(rsa_keys: tuple[bytes, str]) -> None:
    private, public = rsa_keys
    auth = authenticator(jwt_public_key=public)
    token = jwt.encode({"sub": "carol", "exp": int(time.time()) + 60}, private, "RS256")
    assert auth.authenticate(f"Bearer {token}") == Principal("carol", "jwt")


def test_hs256_refused_when_only_rs256_is_configured(rsa_keys: tuple[bytes, str]) -> None:
    _, public = rsa_keys
    # The classic algorithm confusion: an HS256 token "signed" with the public key (built by
    # hand, since PyJWT refuses to sign with a PEM key).
    header = _b64(b'{"alg":"HS256","typ":"JWT"}')
    claims = _b64(b'{"sub":"mallory","exp":9999999999}')
    signature = hmac.new(public.encode(), f"{header}.{claims}".encode(), hashlib.sha256).digest()
    forged = f"{header}.{claims}.{_b64(signature)}"
    assert refused(authenticator(jwt_public_key=public), f"Bearer {forged}") == "INVALID_TOKEN"


def test_audience_and_issuer_are_enforced_when_configured() -> None:
    auth = authenticator(jwt_secret=SECRET, audience="conclave", issuer="https://idp.example")
    good = hs256({"aud": "conclave", "iss": "https://idp.example"})
    assert auth.authenticate(f"Bearer {good}").user_id == "alice"
    for claims in (
        {"iss": "https://idp.example"},
        {"aud": "elsewhere", "iss": "https://idp.example"},
        {"aud": "conclave"},
        {"aud": "conclave", "iss": "https://evil.example"},
    ):
        assert refused(auth, f"Bearer {hs256(claims)}") == "INVALID_TOKEN"


def test_audience_is_not_required_when_not_configured() -> None:
    auth = authenticator(jwt_secret=SECRET)
    assert auth.authenticate(f"Bearer {hs256({'aud': 'anything'})}").user_id == "alice"


def test_disabled_auth_makes_everyone_anonymous() -> None:
    auth = authenticator(enabled=False, tokens={"tok-1": "alice"})
    assert not auth.enabled
    assert auth.authenticate(None) == Principal("anonymous", "none")
    assert auth.authenticate("Bearer whatever") == Principal("anonymous", "none")


def test_token_table_parses_entries() -> None:
    assert parse_token_table(" t1 = alice , t2=bob,, ") == {"t1": "alice", "t2": "bob"}
    assert parse_token_table("") == {}


@pytest.mark.parametrize("raw", ["t1", "t1=", "=alice", "t1=alice,bob", " = "])
def test_token_table_rejects_malformed_entries(raw: str) -> None:
    with pytest.raises(ValueError, match="token=user_id"):
        parse_token_table(raw)
