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

from conclave.platform.auth import (
    OPERATOR,
    SERVICE,
    AuthConfig,
    Authenticator,
    Principal,
    acting_user_header_value,
    parse_token_table,
)
from conclave.platform.errors import Forbidden, Unauthorized

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


def test_disabled_auth_makes_everyone_an_anonymous_operator() -> None:
    # No identities to keep apart: the embedded `conclave up` user sees everything.
    auth = authenticator(enabled=False, tokens={"tok-1": "alice"})
    assert not auth.enabled
    everyone = Principal("anonymous", "none", frozenset({OPERATOR}))
    assert auth.authenticate(None) == everyone
    assert auth.authenticate("Bearer whatever") == everyone
    assert auth.authenticate(None, "ada").user_id == "ada"


def test_token_table_parses_entries() -> None:
    assert parse_token_table(" t1 = alice , t2=bob,, ") == {"t1": "alice", "t2": "bob"}
    assert parse_token_table("") == {}


@pytest.mark.parametrize("raw", ["t1", "t1=", "=alice", "t1=alice,bob", " = "])
def test_token_table_rejects_malformed_entries(raw: str) -> None:
    with pytest.raises(ValueError, match="token=user_id"):
        parse_token_table(raw)


def forged(claims: str, secret: str = SECRET) -> str:
    """An HS256 token over claims written as raw JSON text (what a hostile issuer could sign)."""
    header = _b64(b'{"alg":"HS256","typ":"JWT"}')
    body = _b64(claims.encode())
    signature = hmac.new(secret.encode(), f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{_b64(signature)}"


@pytest.mark.parametrize("claim", ["exp", "iat", "nbf"])
def test_time_claims_as_numeric_strings_are_refused(claim: str) -> None:
    # PyJWT calls int() on these claims, so "1900000000" passed for a number before.
    now = int(time.time())
    claims = {"exp": now + 600, "iat": now - 10, "nbf": now - 10}
    token = hs256({**claims, claim: str(claims[claim])})
    assert refused(authenticator(jwt_secret=SECRET), f"Bearer {token}") == "INVALID_TOKEN"


def test_tokens_living_longer_than_the_maximum_are_refused() -> None:
    auth = authenticator(jwt_secret=SECRET, max_token_lifetime_seconds=3600)
    now = int(time.time())
    year_9999 = hs256({"exp": 253402300799})
    assert refused(auth, f"Bearer {year_9999}") == "INVALID_TOKEN"
    # An old iat makes the span exp - iat too long even though exp itself is close.
    long_lived = hs256({"iat": now - 7200, "exp": now + 60})
    assert refused(auth, f"Bearer {long_lived}") == "INVALID_TOKEN"
    fine = hs256({"iat": now - 60, "exp": now + 3000})
    assert auth.authenticate(f"Bearer {fine}").user_id == "alice"


def test_default_maximum_lifetime_is_a_day() -> None:
    auth = authenticator(jwt_secret=SECRET)
    now = int(time.time())
    assert auth.authenticate(f"Bearer {hs256({'exp': now + 23 * 3600})}").user_id == "alice"
    assert refused(auth, f"Bearer {hs256({'exp': now + 25 * 3600})}") == "INVALID_TOKEN"


@pytest.mark.parametrize(
    "claims",
    [
        '{"sub":"al\\ud800ice","exp":%d}',
        '{"sub":"al\\u0000ice","exp":%d}',
        '{"sub":"alice","exp":%d,"name":"\\udfff"}',
        '{"sub":"alice","exp":%d,"score":NaN}',
        '{"sub":"alice","exp":%d,"n":123456789012345678901234567890}',
        '{"sub":"%s","exp":%%d}' % ("a" * 257),
        '{"sub":"al\\u0007ice","exp":%d}',
    ],
    ids=["surrogate-sub", "nul-sub", "surrogate-claim", "nan", "huge-int", "long-sub", "ctrl"],
)
def test_claims_holding_unusable_values_are_refused(claims: str) -> None:
    token = forged(claims % (int(time.time()) + 600))
    assert refused(authenticator(jwt_secret=SECRET), f"Bearer {token}") == "INVALID_TOKEN"


def test_roles_come_from_settings_and_from_the_jwt_claim() -> None:
    auth = authenticator(
        jwt_secret=SECRET,
        tokens={"tok-op": "olga", "tok-gw": "gateway", "tok-ann": "ann"},
        operators=frozenset({"olga"}),
        services=frozenset({"gateway"}),
    )
    assert auth.authenticate("Bearer tok-op").is_operator
    assert auth.authenticate("Bearer tok-gw").roles == {SERVICE}
    assert auth.authenticate("Bearer tok-ann").roles == frozenset()
    listed = auth.authenticate(f"Bearer {hs256({'roles': ['operator', 'wizard']})}")
    assert listed.roles == {OPERATOR}
    spaced = auth.authenticate(f"Bearer {hs256({'roles': 'service operator'})}")
    assert spaced.roles == {OPERATOR, SERVICE}
    assert not auth.authenticate(f"Bearer {hs256({})}").is_operator
    assert refused(auth, f"Bearer {hs256({'roles': {'operator': True}})}") == "INVALID_TOKEN"


def test_roles_claim_name_is_configurable() -> None:
    auth = authenticator(jwt_secret=SECRET, roles_claim="conclave_roles")
    assert auth.authenticate(f"Bearer {hs256({'conclave_roles': ['operator']})}").is_operator
    assert not auth.authenticate(f"Bearer {hs256({'roles': ['operator']})}").is_operator


def test_declared_roles_come_from_settings_and_the_claim_and_grant_nothing_else() -> None:
    auth = authenticator(
        jwt_secret=SECRET,
        tokens={"tok-ann": "ann", "tok-gw": "gateway"},
        services=frozenset({"gateway"}),
        declared_roles={"analyst": frozenset({"ann"}), "auditor": frozenset()},
    )
    assert auth.known_roles == {OPERATOR, SERVICE, "analyst", "auditor"}
    ann = auth.authenticate("Bearer tok-ann")
    assert ann.roles == {"analyst"} and not ann.is_operator
    claimed = auth.authenticate(f"Bearer {hs256({'roles': ['auditor', 'wizard', 'Analyst']})}")
    assert claimed.roles == {"auditor"}
    assert auth.authenticate(f"Bearer {hs256({'roles': 'analyst operator'})}").roles == {
        "analyst",
        OPERATOR,
    }
    assert auth.roles_of("ann") == {"analyst"} and auth.roles_of("bob") == frozenset()
    # A service acting for ann has ann's roles; ann's role lets her act for no one.
    assert auth.authenticate("Bearer tok-gw", "ann").roles == {"analyst"}
    with pytest.raises(Forbidden) as caught:
        auth.authenticate("Bearer tok-ann", "bob")
    assert caught.value.code == "ACTING_USER_FORBIDDEN"


def test_a_declared_role_cannot_be_a_built_in_one() -> None:
    with pytest.raises(ValueError, match="built-in"):
        authenticator(declared_roles={OPERATOR: frozenset({"mallory"})})


def test_without_declared_roles_a_claim_of_them_is_ignored() -> None:
    auth = authenticator(jwt_secret=SECRET)
    assert auth.known_roles == {OPERATOR, SERVICE}
    assert auth.authenticate(f"Bearer {hs256({'roles': ['analyst']})}").roles == frozenset()


def test_a_service_principal_acts_for_the_user_it_names() -> None:
    auth = authenticator(
        tokens={"tok-gw": "gateway", "tok-ann": "ann"},
        operators=frozenset({"olga"}),
        services=frozenset({"gateway"}),
    )
    acting = auth.authenticate("Bearer tok-gw", "ann")
    assert acting == Principal("ann", "token", frozenset(), on_behalf_of="gateway")
    # The acting user's roles are their own, from settings: never the service's.
    assert auth.authenticate("Bearer tok-gw", "olga").roles == {OPERATOR}
    assert auth.authenticate("Bearer tok-gw") == Principal("gateway", "token", frozenset({SERVICE}))


@pytest.mark.parametrize(
    "header",
    [
        "",
        "a" * 257,
        "ann\x01",
        "\udc80",
        "%zz",  # an escape of nothing: "%zz" and "%25zz" would be one user
        "ann%",
        "Jos\xc3\xa9",  # raw UTF-8 bytes, read as latin-1: not percent-encoded
        "ann%C2%85",  # a C1 control (NEL)
        "ann smith",  # a raw space: the sender percent-encodes it
    ],
)
def test_acting_user_must_be_a_usable_user_id(header: str) -> None:
    auth = authenticator(tokens={"tok-gw": "gateway"}, services=frozenset({"gateway"}))
    with pytest.raises(Forbidden) as caught:
        auth.authenticate("Bearer tok-gw", header)
    assert caught.value.code == "ACTING_USER_FORBIDDEN"


def test_an_acting_user_is_read_as_its_sender_percent_encodes_it() -> None:
    auth = authenticator(tokens={"tok-gw": "gateway"}, services=frozenset({"gateway"}))
    for user in ("José", "ann@example.org", "a+b", "ann smith", "50%"):
        header = acting_user_header_value(user)
        assert auth.authenticate("Bearer tok-gw", header).user_id == user


def test_only_service_principals_may_name_an_acting_user() -> None:
    auth = authenticator(tokens={"tok-ann": "ann"}, operators=frozenset({"ann"}))
    with pytest.raises(Forbidden) as caught:
        auth.authenticate("Bearer tok-ann", "bob")
    assert (caught.value.status, caught.value.code) == (403, "ACTING_USER_FORBIDDEN")
    # Credentials are checked first: no header value turns a bad token into a user.
    with pytest.raises(Unauthorized):
        auth.authenticate("Bearer wrong", "bob")


def test_token_table_refuses_user_ids_that_cannot_be_recorded() -> None:
    with pytest.raises(ValueError, match="not usable"):
        parse_token_table(f"t1={'a' * 257}")


def test_naming_oneself_as_the_acting_user_changes_nothing() -> None:
    # A client that forwards its own caller (the graph dispatching for the token's own user)
    # needs no service role to say who it is.
    auth = authenticator(tokens={"tok-ann": "ann"})
    assert auth.authenticate("Bearer tok-ann", "ann") == auth.authenticate("Bearer tok-ann")


def _challenge(auth: Authenticator, header: str | None) -> str:
    with pytest.raises(Unauthorized) as caught:
        auth.authenticate(header)
    return caught.value.headers["WWW-Authenticate"]


def test_challenge_says_invalid_token_only_when_a_token_was_refused():
    auth = authenticator(tokens={"tok": "ada"}, jwt_secret=SECRET)
    expired = hs256({"exp": int(time.time()) - 10})
    # RFC 6750 §3.1: no error code when the request carried no bearer credentials.
    assert _challenge(auth, None) == 'Bearer realm="conclave"'
    assert _challenge(auth, "Basic YWRhOng=") == 'Bearer realm="conclave"'
    assert _challenge(auth, "Bearer wrong") == (
        'Bearer realm="conclave", error="invalid_token", error_description="Invalid bearer token."'
    )
    assert _challenge(auth, f"Bearer {expired}") == (
        'Bearer realm="conclave", error="invalid_token", error_description="Token expired."'
    )


def test_challenge_description_stays_a_valid_quoted_string():
    refusal = Unauthorized('Token "x" \\ café\r\n', code="INVALID_TOKEN")
    header = refusal.headers["WWW-Authenticate"]
    description = header.split('error_description="', 1)[1]
    assert description == "Token 'x' ' caf'''\""  # RFC 6750 §3: %x20-21 / %x23-5B / %x5D-7E
