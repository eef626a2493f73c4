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

What the URL answers is untrusted input (a misconfigured issuer, a captive portal, a compromised
CDN), so a fetch is bounded in every way a request waiting on it could notice:

- one deadline (:data:`FETCH_DEADLINE_SECONDS`) for connecting, the headers and the whole body,
  not only a per-read timeout that a server sending a byte a second never trips;
- the body is asked for and read as sent (``Accept-Encoding: identity``; a compressed answer is
  refused), so the size cap counts the bytes that are held, not a compressed few;
- the document is parsed and its keys built in a worker thread, examining at most
  :data:`MAX_ENTRIES_EXAMINED` entries; any parse failure (nesting deep enough for a
  ``RecursionError`` included) is a failed fetch;
- an entry holding private key material (``d``, ``p``, ``q``, ``dp``, ``dq``, ``qi``, ``oth``,
  ``k``) is skipped before parsing, with a log line: its private half is public now, and parsing
  it could cost seconds of CPU; an RSA key shorter than :data:`MIN_RSA_BITS` is skipped too.

A fetch that fails keeps the last good set, for at most ``max_stale_seconds`` (24 h by default)
after it was fetched: past that, a token naming one of its keys waits for a fetch and, if the
issuer is still unreachable, is answered 503 like before any set was fetched.
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
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

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
MAX_ENTRIES_EXAMINED = 128
"""Entries of one document looked at, kept or not; the ones after are ignored."""
MIN_RSA_BITS = 2048
"""The shortest RSA modulus kept (RFC 7518 §3.3)."""
PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
"""JWK members that carry private or symmetric key material (RFC 7518 §6.2.2, §6.3.2, §6.4)."""
FETCH_DEADLINE_SECONDS = 5.0
"""The longest one fetch may take, from connecting to the last byte of the body."""


class JwksUnavailable(Exception):
    """No key set has ever been fetched, so no token can be judged."""


@dataclass(frozen=True)
class JwksSettings:
    """Where the keys are and how often they may be fetched."""

    url: str
    cache_seconds: float = 300.0
    min_refresh_seconds: float = 30.0
    max_stale_seconds: float = 86_400.0
    """How long the last good set stays in use while every fetch fails."""


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
        if not self._usable():
            raise JwksUnavailable("the issuer's keys could not be fetched")
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    def _may_fetch(self) -> bool:
        attempted = self._attempted_at
        return attempted is None or (
            self._clock() - attempted >= self._settings.min_refresh_seconds
        )

    def _usable(self) -> bool:
        """Whether a set is held that is not older than the longest it may be kept stale."""
        fetched = self._fetched_at
        return fetched is not None and (self._clock() - fetched < self._settings.max_stale_seconds)

    def _holds(self, kid: str | None) -> bool:
        return self._usable() and (kid in self._keys if kid is not None else len(self._keys) == 1)

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
            with anyio.fail_after(FETCH_DEADLINE_SECONDS):
                body = await self._download()
            # Parsing and building keys is CPU work on untrusted input: off the event loop.
            keys = await asyncio.to_thread(_keys_of, body)
        except (httpx.HTTPError, ValueError, RecursionError, TimeoutError) as exc:
            # The last good set stays: an issuer that is briefly down locks nobody out.
            log.warning(
                "JWKS fetch failed, keeping %d cached keys: %s",
                len(self._keys),
                exc.__class__.__name__ if isinstance(exc, RecursionError) else exc,
            )
            return
        self._keys = keys
        self._fetched_at = self._clock()
        log.info("JWKS fetched: %d usable keys", len(keys))

    async def _download(self) -> bytes:
        if self._client is None:
            self._client = guarded_client(
                self._policy, timeout=FETCH_DEADLINE_SECONDS, max_redirects=0
            )
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        async with self._client.stream("GET", self._settings.url, headers=headers) as response:
            if response.status_code != 200:
                raise ValueError(f"the JWKS URL answered {response.status_code}")
            encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                # Decoding it would hold what the size cap is there to refuse (a bomb).
                raise ValueError(f"the JWKS URL answered with Content-Encoding {encoding!r}")
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise ValueError(f"the JWKS is larger than {MAX_DOCUMENT_BYTES} bytes")
        return bytes(body)


def _keys_of(body: bytes) -> dict[str, jwt.PyJWK]:
    """The usable keys of a JWKS body (``ValueError``, ``RecursionError`` when it is not one)."""
    return _usable_keys(json.loads(body))


def _usable_keys(document: object) -> dict[str, jwt.PyJWK]:
    """The asymmetric signing keys of a JWKS document, by key id (``ValueError`` for a document
    that is not a key set or holds no usable key)."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError("the JWKS is not an object with a 'keys' list")
    keys: dict[str, jwt.PyJWK] = {}
    for entry in document["keys"][:MAX_ENTRIES_EXAMINED]:
        if len(keys) >= MAX_KEYS:
            break
        if not isinstance(entry, dict) or entry.get("kty") == "oct":
            continue  # a symmetric key published for all to see would let anyone sign
        if entry.get("use", "sig") != "sig":
            continue
        kid = entry.get("kid")
        if PRIVATE_MEMBERS.intersection(entry):
            # The issuer published its private half: anyone can sign with it now.
            log.warning("JWKS entry %.64r holds private key material: skipped", kid)
            continue
        key = _parsed(entry)
        if key is None or key.algorithm_name not in ACCEPTED_ALGORITHMS:
            continue
        if isinstance(key.key, RSAPublicKey) and key.key.key_size < MIN_RSA_BITS:
            log.warning("JWKS entry %.64r is a %d-bit RSA key: skipped", kid, key.key.key_size)
            continue
        keys[kid if isinstance(kid, str) else ""] = key
    if not keys:
        raise ValueError("the JWKS holds no usable signing key")
    return keys


def _parsed(entry: dict[str, object]) -> jwt.PyJWK | None:
    """The key an entry describes, or ``None`` when it is not one this build can use (an
    unknown type or curve, members of the wrong shape): the other entries still serve."""
    try:
        return jwt.PyJWK(entry)
    except (jwt.PyJWTError, ValueError, TypeError, KeyError, OverflowError):
        return None
