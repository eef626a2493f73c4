"""An issuer's JWKS, served by a real local HTTP server: which keys are kept, the bounds on the
document and on how long a set is kept stale, and tokens without a key id."""

from __future__ import annotations

import gzip
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
from conclave.platform.jwks import (
    MAX_DOCUMENT_BYTES,
    MAX_ENTRIES_EXAMINED,
    MAX_KEYS,
    JwksKeys,
    JwksSettings,
)
from tests.gateway.oauth_server import SigningKey
from tests.httpserver import running_server


class JwksDocument:
    """What the local server answers at ``/jwks``: raw bytes the test sets."""

    def __init__(self) -> None:
        self.body = b'{"keys": []}'
        self.status = 200
        self.headers: dict[str, str] = {}
        self.asked_encodings: list[str | None] = []

    async def serve(self, request: Request) -> Response:
        self.asked_encodings.append(request.headers.get("accept-encoding"))
        return Response(
            self.body, status_code=self.status, media_type="application/json", headers=self.headers
        )


@pytest.fixture
async def served() -> AsyncIterator[tuple[JwksDocument, str]]:
    document = JwksDocument()
    async with running_server(Starlette(routes=[Route("/jwks", document.serve)])) as url:
        yield document, f"{url}/jwks"


class Clock:
    """Time the test moves (the set's age is what is judged, not the wall clock)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def keys_at(url: str, *, min_refresh_seconds: float = 0, clock: Clock | None = None) -> JwksKeys:
    return JwksKeys(
        JwksSettings(url, min_refresh_seconds=min_refresh_seconds, max_stale_seconds=3_600),
        EgressPolicy.build(hosts="127.0.0.1"),
        clock=clock or time.monotonic,
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


async def test_entries_after_the_examined_bound_are_ignored(served: tuple[JwksDocument, str]):
    """Entries skipped (unusable here) still count: a document of junk entries cannot make the
    fetch examine more than MAX_ENTRIES_EXAMINED of them."""
    document, url = served
    junk = [{"kty": "EC", "crv": "P-999", "kid": f"j{index}"} for index in range(200)]
    late = SigningKey.ed25519("late").jwk()
    document.body = as_json(*junk[: MAX_ENTRIES_EXAMINED - 1], late)
    keys = keys_at(url)
    await keys.refresh_for("late")
    assert keys.key_for("late") is not None
    document.body = as_json(*junk[:MAX_ENTRIES_EXAMINED], late)
    fresh = keys_at(url)
    await fresh.refresh_for("late")
    assert not fresh.loaded  # the one usable key came after the bound: no set
    await keys.aclose()
    await fresh.aclose()


async def test_the_document_is_asked_for_as_sent_and_a_compressed_one_is_refused(
    served: tuple[JwksDocument, str],
):
    document, url = served
    signer = SigningKey.ec("k1")
    document.body = gzip.compress(as_json(signer.jwk()))
    document.headers = {"Content-Encoding": "gzip"}
    keys = keys_at(url)
    await keys.refresh_for("k1")
    assert document.asked_encodings == ["identity"]
    assert not keys.loaded
    document.body, document.headers = as_json(signer.jwk()), {}
    await keys.refresh_for("k1")
    assert keys.key_for("k1") is not None
    await keys.aclose()


async def test_a_set_is_kept_while_the_issuer_is_down_but_not_past_the_stale_limit(
    served: tuple[JwksDocument, str],
):
    document, url = served
    clock = Clock()
    signer = SigningKey.ec("k1")
    document.body = as_json(signer.jwk())
    keys = keys_at(url, clock=clock)
    auth = authenticator_with(keys)
    token = signer.sign(claims())
    assert (await auth.authenticate_async(f"Bearer {token}")).user_id == "ada"
    document.status = 503
    clock.now += 3_000  # stale, the issuer down: the last good set still serves
    assert (await auth.authenticate_async(f"Bearer {token}")).user_id == "ada"
    clock.now += 700  # past max_stale_seconds (3,600 s here) since the last good fetch
    with pytest.raises(Unavailable) as refused:
        await auth.authenticate_async(f"Bearer {token}")
    assert refused.value.code == "AUTH_KEYS_UNAVAILABLE"
    document.status = 200
    clock.now += 1
    assert (await auth.authenticate_async(f"Bearer {token}")).user_id == "ada"
    await keys.aclose()
