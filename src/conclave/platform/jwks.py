"""The signing keys of an OAuth authorization server, from its JWKS URL (RFC 7517).

Keys are fetched through the egress policy, kept in memory and fetched again:

- when the set is older than its time to live (``CONCLAVE_JWT_JWKS_CACHE_SECONDS``), so a key the
  issuer retired stops being accepted and a published one starts being accepted;
- when a token names a key id (``kid``) the set does not hold, which is how a rotation shows up
  first: the issuer signs with a new key as soon as it publishes it.

Either fetch happens at most once per ``CONCLAVE_JWT_JWKS_MIN_REFRESH_SECONDS``, whatever the
tokens say: a caller sending tokens with random key ids gets 401s, not one fetch per request. A
fetch that fails keeps the last good set (an issuer that is briefly down does not lock everyone
out). Only a request whose key is missing waits for a fetch (concurrent ones wait for the same
one); a stale set that holds the request's key is refreshed in the background, so a slow issuer
delays nobody whose key is known.

Only asymmetric keys of the algorithms in :data:`ACCEPTED_ALGORITHMS` are kept, each key bound to
its one algorithm (the JWK's ``alg``, else the one its type and curve imply): a token must be
signed with exactly that algorithm, so ``none`` and an HS256 token "signed" with a public key as
the secret never verify. The document is read up to :data:`MAX_DOCUMENT_BYTES` and at most
:data:`MAX_KEYS` keys are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import httpx
import jwt

from conclave.platform.egress import EgressPolicy, guarded_client

log = logging.getLogger(__name__)

ACCEPTED_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
"""Signature algorithms a JWKS key may carry (asymmetric only)."""
MAX_DOCUMENT_BYTES = 262_144
"""A JWKS larger than this is refused (a set of a few keys is a few kilobytes)."""
MAX_KEYS = 64
"""Keys kept from one document; the ones after are ignored."""
_FETCH_TIMEOUT_SECONDS = 5.0


class JwksUnavailable(Exception):
    """No key set has ever been fetched, so no token can be judged."""


@dataclass(frozen=True)
class JwksSettings:
    """Where the keys are and how often they may be fetched."""

    url: str
    cache_seconds: float = 300.0
    min_refresh_seconds: float = 30.0


class JwksKeys:
    """The issuer's current verification keys by key id, refreshed as the module text says."""

    def __init__(
        self,
        settings: JwksSettings,
        policy: EgressPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._policy = policy
        self._clock = clock
        self._client: httpx.AsyncClient | None = None
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None  # of the last good set
        self._attempted_at: float | None = None  # of the last fetch, good or not
        self._lock = anyio.Lock()
        self._background: asyncio.Task[None] | None = None

    @property
    def loaded(self) -> bool:
        """Whether a key set has been fetched at least once."""
        return self._fetched_at is not None

    def key_for(self, kid: str | None) -> jwt.PyJWK | None:
        """The cached key ``kid`` names (without ``kid``, the only key of a one-key set);
        raises :class:`JwksUnavailable` when no set was ever fetched."""
        if not self.loaded:
            raise JwksUnavailable("the issuer's keys could not be fetched")
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    def _may_fetch(self) -> bool:
        attempted = self._attempted_at
        return attempted is None or (
            self._clock() - attempted >= self._settings.min_refresh_seconds
        )

    def _holds(self, kid: str | None) -> bool:
        return self.loaded and (kid in self._keys if kid is not None else len(self._keys) == 1)

    def _stale(self) -> bool:
        fetched = self._fetched_at
        return fetched is None or self._clock() - fetched >= self._settings.cache_seconds

    async def refresh_for(self, kid: str | None) -> None:
        """Make the set fit a token naming ``kid``: wait for a fetch when the key is missing,
        refresh in the background when the set is stale; either at most once per interval."""
        if not self._may_fetch():
            return
        if self._holds(kid):
            if self._stale() and (self._background is None or self._background.done()):
                self._background = asyncio.create_task(self._refresh_if(self._stale))
            return
        await self._refresh_if(lambda: not self._holds(kid))

    async def _refresh_if(self, needed: Callable[[], bool]) -> None:
        async with self._lock:
            # Another caller may have fetched while this one waited for the lock.
            if needed() and self._may_fetch():
                await self._fetch()

    async def aclose(self) -> None:
        """Stop a background refresh and close the HTTP client (the app's shutdown)."""
        if self._background is not None:
            self._background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._background
            self._background = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _fetch(self) -> None:
        self._attempted_at = self._clock()
        try:
            document = await self._download()
            keys = _usable_keys(document)
        except (httpx.HTTPError, ValueError) as exc:
            # The last good set stays: an issuer that is briefly down locks nobody out.
            log.warning("JWKS fetch failed, keeping %d cached keys: %s", len(self._keys), exc)
            return
        self._keys = keys
        self._fetched_at = self._clock()
        log.info("JWKS fetched: %d usable keys", len(keys))

    async def _download(self) -> object:
        if self._client is None:
            self._client = guarded_client(
                self._policy, timeout=_FETCH_TIMEOUT_SECONDS, max_redirects=0
            )
        async with self._client.stream(
            "GET", self._settings.url, headers={"Accept": "application/json"}
        ) as response:
            if response.status_code != 200:
                raise ValueError(f"the JWKS URL answered {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise ValueError(f"the JWKS is larger than {MAX_DOCUMENT_BYTES} bytes")
        return json.loads(body)


def _usable_keys(document: object) -> dict[str, jwt.PyJWK]:
    """The asymmetric signing keys of a JWKS document, by key id (``ValueError`` for a document
    that is not a key set or holds no usable key)."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError("the JWKS is not an object with a 'keys' list")
    keys: dict[str, jwt.PyJWK] = {}
    for entry in document["keys"]:
        if len(keys) >= MAX_KEYS:
            break
        if not isinstance(entry, dict) or entry.get("kty") == "oct":
            continue  # a symmetric key published for all to see would let anyone sign
        if entry.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK(entry)
        except jwt.PyJWTError:
            continue  # an unknown key type or curve: the other keys still serve
        if key.algorithm_name not in ACCEPTED_ALGORITHMS:
            continue
        kid = entry.get("kid")
        keys[kid if isinstance(kid, str) else ""] = key
    if not keys:
        raise ValueError("the JWKS holds no usable signing key")
    return keys
