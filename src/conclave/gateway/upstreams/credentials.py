"""Users' own credentials for upstream MCP servers: checked, encrypted at rest, looked up per call.

A credential is encrypted with AES-256-GCM under the first key of
``GATEWAY_UPSTREAM_CREDENTIAL_KEYS``; every listed key decrypts (rotation: put the new key
first, restart, re-register or let users replace, then drop the old key once no row names it —
a gateway refuses to start while a stored credential's key is missing, rather than failing each
of those users' calls). The associated data is the server's and the user's names, so a ciphertext
copied to another row (another user, another server) does not decrypt. A row stores the key's id
(derived from the key, never the key) and ``nonce || ciphertext``.

The plaintext lives only in memory, for the time of a call or of the HTTP session opened with
it; it is never answered, logged, audited or published (docs/security.md).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.gateway import store
from conclave.gateway.upstreams.redaction import MIN_SECRET_CHARS
from conclave.platform.clock import utc_now
from conclave.platform.db.engine import store_errors
from conclave.platform.errors import Unprocessable
from conclave.platform.key_files import key_file_bytes, read_key_file
from conclave.platform.problem_types import ProblemCode

KEY_BYTES = 32
MAX_CREDENTIAL_CHARS = 4096
# Shorter ones are not credentials, and what an upstream answers is scrubbed of the credential's
# text: a two-letter one would blank every such pair of letters.
MIN_CREDENTIAL_CHARS = MIN_SECRET_CHARS
# How long a key file found empty is read again (another process writing it in place).
_KEY_FILE_WAIT_SECONDS = 2.0
_NONCE_BYTES = 12
_KEY_ID_DOMAIN = b"conclave upstream credential key\x00"
_AAD_DOMAIN = b"conclave upstream credential v1\x00"
_SEPARATORS = re.compile(r"[\s,]+")
# Visible ASCII with inner spaces: what any header carries unchanged. No CR/LF (header
# injection), no NUL or control characters, no non-ASCII (clients encode it differently).
_HEADER_SAFE = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?\Z")


class CredentialKeyError(ValueError):
    """The credential keys cannot be used (malformed, or a stored credential's key is missing)."""


class CredentialUnreadable(Exception):
    """A stored credential does not decrypt with the keys and the row it was read from."""


@dataclass(frozen=True)
class CredentialKey:
    """One AES-256-GCM key and its id (a digest of the key, safe to store and log)."""

    key_id: str
    aead: AESGCM

    @classmethod
    def from_bytes(cls, raw: bytes) -> CredentialKey:
        """The key of 32 raw bytes."""
        if len(raw) != KEY_BYTES:
            raise CredentialKeyError(f"a credential key is {KEY_BYTES} bytes")
        key_id = hashlib.sha256(_KEY_ID_DOMAIN + raw).hexdigest()[:16]
        return cls(key_id, AESGCM(raw))


def parse_keys(text: str) -> list[CredentialKey]:
    """The keys of ``GATEWAY_UPSTREAM_CREDENTIAL_KEYS`` (URL-safe base64 of 32 bytes each),
    first one first. The error names a key by its position, never by its text."""
    keys: list[CredentialKey] = []
    for position, item in enumerate(_SEPARATORS.split(text.strip()), start=1):
        if not item:
            continue
        try:
            raw = base64.urlsafe_b64decode(item + "=" * (-len(item) % 4))
            keys.append(CredentialKey.from_bytes(raw))
        except (binascii.Error, ValueError) as exc:
            raise CredentialKeyError(
                f"GATEWAY_UPSTREAM_CREDENTIAL_KEYS: key {position} is not {KEY_BYTES} bytes of "
                "URL-safe base64"
            ) from exc
    return keys


def new_key_text() -> str:
    """A fresh key in the form ``GATEWAY_UPSTREAM_CREDENTIAL_KEYS`` takes."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode().rstrip("=")


def embedded_key(path: Path) -> CredentialKey:
    """The key kept in ``path`` (embedded mode), generated on first start.

    Kept as :mod:`conclave.platform.key_files` keeps every key file (this user's, mode 0600, in
    a folder others may not write; written whole and linked into place, so two processes
    starting together end with one key). A file found empty (a process of an earlier version
    still writing it in place) is read again for a short while before it is refused."""
    content = key_file_bytes(path, lambda: new_key_text() + "\n", CredentialKeyError)
    deadline = time.monotonic() + _KEY_FILE_WAIT_SECONDS
    while not content.strip() and time.monotonic() < deadline:
        time.sleep(0.05)
        content = read_key_file(path, CredentialKeyError)
    keys = parse_keys(content.decode("ascii", "replace"))
    if len(keys) != 1:
        raise CredentialKeyError(f"{path} must hold one credential key")
    return keys[0]


def _associated_data(server: str, user_id: str) -> bytes:
    # Length-prefixed: no (server, user) pair can be spelt like another one.
    parts = [part.encode("utf-8", "surrogatepass") for part in (server, user_id)]
    return _AAD_DOMAIN + b"".join(len(part).to_bytes(4, "big") + part for part in parts)


class CredentialCipher:
    """Encrypts under the first key, decrypts under any."""

    def __init__(self, keys: Sequence[CredentialKey]) -> None:
        if not keys:
            raise CredentialKeyError("no credential key")
        self._keys = {key.key_id: key for key in keys}
        self._current = keys[0]

    def knows(self, key_id: str) -> bool:
        """Whether ``key_id`` is one of the keys."""
        return key_id in self._keys

    def encrypt(self, server: str, user_id: str, credential: str) -> tuple[str, bytes]:
        """``(key_id, nonce || ciphertext)`` of ``credential`` for (server, user)."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._current.aead.encrypt(
            nonce, credential.encode(), _associated_data(server, user_id)
        )
        return self._current.key_id, nonce + sealed

    def decrypt(self, server: str, user_id: str, key_id: str, blob: bytes) -> str:
        """The credential of (server, user); :class:`CredentialUnreadable` if it is not theirs
        or its key is gone."""
        key = self._keys.get(key_id)
        if key is None:
            raise CredentialUnreadable("its key is not configured")
        try:
            plain = key.aead.decrypt(
                blob[:_NONCE_BYTES], blob[_NONCE_BYTES:], _associated_data(server, user_id)
            )
            return plain.decode()
        except (InvalidTag, ValueError) as exc:
            # ValueError: a row too short to hold a nonce (truncated, tampered), or plaintext
            # that is not UTF-8. Any row that does not decrypt is "register it again".
            raise CredentialUnreadable("it does not decrypt for this server and user") from exc


def check_credential(value: str) -> str:
    """``value`` if a header can carry it; :class:`Unprocessable` (never echoing it) if not."""
    if not MIN_CREDENTIAL_CHARS <= len(value) <= MAX_CREDENTIAL_CHARS:
        raise Unprocessable(
            f"A credential is {MIN_CREDENTIAL_CHARS} to {MAX_CREDENTIAL_CHARS} characters.",
            code=ProblemCode.UPSTREAM_CREDENTIAL_INVALID,
        )
    if not _HEADER_SAFE.match(value):
        raise Unprocessable(
            "A credential holds visible ASCII characters and inner spaces only (no line breaks, "
            "control characters or leading and trailing spaces).",
            code=ProblemCode.UPSTREAM_CREDENTIAL_INVALID,
        )
    return value


class CredentialVault:
    """The stored credentials of one gateway: register, replace, delete, read for a call."""

    def __init__(self, engine: AsyncEngine, cipher: CredentialCipher) -> None:
        self._engine = engine
        self._cipher = cipher

    async def check_keys(self) -> None:
        """:class:`CredentialKeyError` when a stored credential's key is not configured: a
        wrong or dropped key is a start-up error, not a refusal of some users' calls."""
        missing = sorted(
            key_id
            for key_id in await store.upstream_credential_key_ids(self._engine)
            if not self._cipher.knows(key_id)
        )
        if missing:
            raise CredentialKeyError(
                "stored upstream credentials are encrypted with keys not in "
                f"GATEWAY_UPSTREAM_CREDENTIAL_KEYS (key ids {', '.join(missing)}): give the keys "
                "they were written with"
            )

    async def put(self, server: str, user_id: str, credential: str) -> None:
        """Register or replace ``user_id``'s credential for ``server``."""
        key_id, blob = self._cipher.encrypt(server, user_id, check_credential(credential))
        with store_errors():
            async with self._engine.begin() as connection:
                await store.put_upstream_credential(
                    connection, server, user_id, key_id, blob, utc_now()
                )

    async def delete(self, server: str, user_id: str) -> bool:
        """Remove ``user_id``'s credential for ``server``; whether there was one."""
        with store_errors():
            async with self._engine.begin() as connection:
                return await store.delete_upstream_credential(connection, server, user_id)

    async def get(self, server: str, user_id: str) -> str | None:
        """``user_id``'s credential for ``server``, or ``None``."""
        with store_errors():
            found = await store.get_upstream_credential(self._engine, server, user_id)
        if found is None:
            return None
        return self._cipher.decrypt(server, user_id, *found)

    async def servers_of(self, user_id: str) -> set[str]:
        """The servers ``user_id`` has a credential for."""
        with store_errors():
            return await store.upstreams_with_credential(self._engine, user_id)
