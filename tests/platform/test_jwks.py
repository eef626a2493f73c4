"""An issuer's JWKS, served by a real local HTTP server: which keys are kept, the bounds on the
document, and tokens without a key id."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import jwt
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from conclave.platform.auth import AuthConfig, Authenticator
from conclave.platform.egress import EgressPolicy
from conclave.platform.errors import Unauthorized, Unavailable
from conclave.platform.jwks import MAX_DOCUMENT_BYTES, MAX_KEYS, JwksKeys, JwksSettings
from tests.gateway.oauth_server import SigningKey
from tests.httpserver import running_server


class JwksDocument:
    """What the local server answers at ``/jwks``: raw bytes the test sets."""

    def __init__(self) -> None:
        self.body = b'{"keys": []}'

    async def serve(self, _request: Request) -> Response:
        return Response(self.body, media_type="application/json")


@pytest.fixture
async def served() -> AsyncIterator[tuple[JwksDocument, str]]:
    document = JwksDocument()
    async with running_server(Starlette(routes=[Route("/jwks", document.serve)])) as url:
        yield document, f"{url}/jwks"


def keys_at(url: str, *, min_refresh_seconds: float = 0) -> JwksKeys:
    return JwksKeys(
        JwksSettings(url, min_refresh_seconds=min_refresh_seconds),
        EgressPolicy.build(hosts="127.0.0.1"),
    )


def authenticator_with(keys: JwksKeys) -> Authenticator:
    return Authenticator(AuthConfig(enabled=True, tokens={}), keys)


def claims() -> dict[str, Any]:
    return {"sub": "ada", "exp": int(time.time()) + 60}


def as_json(*entries: Any) -> bytes:
    return json.dumps({"keys": list(entries)}).encode()


async def test_only_asymmetric_signing_keys_are_kept(served: tuple[JwksDocument, str]):
    document, url = served
    good = SigningKey.ec("good")
    rsa_key = SigningKey.rsa("enc").jwk()
    document.body = as_json(
        {"kty": "oct", "k": "c2VjcmV0", "kid": "shared", "alg": "HS256"},
        {**rsa_key, "use": "enc"},
        {"kty": "EC", "crv": "P-999", "kid": "odd"},
        "not a key",
        good.jwk(),
    )
    keys = keys_at(url)
    await keys.refresh_for("good")
    assert keys.key_for("good") is not None
    assert [keys.key_for(kid) for kid in ("shared", "enc", "odd")] == [None, None, None]
    await keys.aclose()


async def test_a_document_over_the_limit_or_without_keys_leaves_no_keys(
    served: tuple[JwksDocument, str],
):
    document, url = served
    document.body = b'{"keys": [' + b" " * MAX_DOCUMENT_BYTES + b"]}"
    keys = keys_at(url)
    await keys.refresh_for(None)
    assert not keys.loaded
    document.body = b'{"keys": "none"}'
    await keys.refresh_for(None)
    assert not keys.loaded
    token = SigningKey.rsa("k1").sign(claims())
    with pytest.raises(Unavailable) as refused:
        authenticator_with(keys).authenticate(f"Bearer {token}")
    assert refused.value.code == "AUTH_KEYS_UNAVAILABLE"
    await keys.aclose()


async def test_at_most_max_keys_are_kept(served: tuple[JwksDocument, str]):
    document, url = served
    one = SigningKey.ed25519("x").jwk()
    document.body = as_json(*({**one, "kid": f"k{index}"} for index in range(MAX_KEYS + 5)))
    keys = keys_at(url)
    await keys.refresh_for(None)
    assert keys.key_for(f"k{MAX_KEYS - 1}") is not None
    assert keys.key_for(f"k{MAX_KEYS}") is None
    await keys.aclose()


async def test_a_token_without_kid_is_judged_only_by_a_one_key_set(
    served: tuple[JwksDocument, str],
):
    document, url = served
    signer, other = SigningKey.rsa("k1"), SigningKey.rsa("k2")
    token = jwt.encode(claims(), signer.private, algorithm="RS256")
    assert "kid" not in jwt.get_unverified_header(token)
    document.body = as_json(signer.jwk())
    keys = keys_at(url)
    principal = await authenticator_with(keys).authenticate_async(f"Bearer {token}")
    assert (principal.user_id, principal.method) == ("ada", "jwt")
    document.body = as_json(signer.jwk(), other.jwk())
    await keys.refresh_for("k2-missing")  # the set is fetched again: now two keys
    with pytest.raises(Unauthorized) as refused:
        await authenticator_with(keys).authenticate_async(f"Bearer {token}")
    assert refused.value.code == "INVALID_TOKEN"
    await keys.aclose()
