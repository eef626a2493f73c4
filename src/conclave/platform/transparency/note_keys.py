"""Ed25519 signer and verifier keys in the text forms of C2SP signed-note and Go's
``golang.org/x/mod/sumdb/note``.

- A verifier key (*vkey*, public): ``<name>+<key id as 8 lowercase hex digits>+<base64(0x01 ||
  32-byte public key)>``.
- A signer key (*skey*, secret): ``PRIVATE+KEY+<name>+<key id>+<base64(0x01 || 32-byte seed)>``,
  Go's form, read and written the same way.
- The key id is the first four bytes, big-endian, of ``SHA-256(name || 0x0A || 0x01 || public
  key)``: it names the key inside a signature line, and a text whose id does not match its key
  is refused.

Key names are non-empty, valid UTF-8, and hold no Unicode white space and no ``+`` (the
separator of the key forms); control characters are refused too, since no note could carry them.
"""

from __future__ import annotations

import hashlib
import re
from typing import Protocol

from cryptography.exceptions import InvalidSignature as CryptographyInvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from conclave.platform.transparency import base64text
from conclave.platform.transparency.errors import MalformedKey

ED25519 = 0x01
"""The signature type byte of plain Ed25519 note signatures (C2SP signed-note)."""

_KEY_ID = re.compile(r"[0-9a-f]{8}")
# Unicode's White_Space property, which is what Go's unicode.IsSpace tests.
_WHITE_SPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
_PRIVATE_PREFIX = "PRIVATE+KEY+"


class Verifier(Protocol):
    """A key that checks note signatures: its name and id select it for a signature line."""

    @property
    def name(self) -> str: ...

    @property
    def key_id(self) -> int: ...

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Whether ``signature`` (without the key id) signs ``message`` (the note text)."""
        ...


class Signer(Protocol):
    """A key that signs note texts."""

    @property
    def name(self) -> str: ...

    @property
    def key_id(self) -> int: ...

    def sign(self, message: bytes) -> bytes:
        """The signature of ``message`` (the note text), without the key id."""
        ...


def is_valid_key_name(name: object) -> bool:
    """Whether ``name`` may name a key: non-empty UTF-8 without white space, ``+`` or control
    characters."""
    if not isinstance(name, str) or not name or "+" in name:
        return False
    if any(c in _WHITE_SPACE or c < " " for c in name):
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def key_id(name: str, key_type: int, public_key: bytes) -> int:
    """``SHA-256(name || 0x0A || key_type || public_key)[:4]`` as a big-endian integer."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([key_type]) + public_key)
    return int.from_bytes(digest.digest()[:4], "big")


def _split_key(text: object, what: str) -> tuple[str, int, bytes]:
    """``(name, key id, type byte || key)`` of ``<name>+<hex id>+<base64>``, id not yet checked."""
    if not isinstance(text, str):
        raise MalformedKey(f"a {what} is text")
    name, _, rest = text.partition("+")
    id_hex, _, key_text = rest.partition("+")
    if not is_valid_key_name(name):
        raise MalformedKey(f"the {what}'s name is empty or holds a space, '+' or control character")
    if not _KEY_ID.fullmatch(id_hex):
        raise MalformedKey(f"the {what}'s key id is not 8 lowercase hex digits")
    key = base64text.decode(key_text, f"the {what}'s key", MalformedKey)
    if len(key) != 33 or key[0] != ED25519:
        raise MalformedKey(f"the {what} is not an Ed25519 key (type 0x01, 32 bytes)")
    return name, int(id_hex, 16), key


class NoteVerifier:
    """An Ed25519 verifier key (C2SP signed-note type 0x01)."""

    __slots__ = ("_key", "_key_id", "_name", "_public_key")

    def __init__(self, name: str, public_key: bytes) -> None:
        if not is_valid_key_name(name):
            raise MalformedKey("a key name is non-empty without space, '+' or control character")
        if not isinstance(public_key, bytes) or len(public_key) != 32:
            raise MalformedKey("an Ed25519 public key is 32 bytes")
        try:
            self._key = Ed25519PublicKey.from_public_bytes(public_key)
        except ValueError:
            raise MalformedKey("not an Ed25519 public key") from None
        self._name = name
        self._public_key = public_key
        self._key_id = key_id(name, ED25519, public_key)

    @property
    def name(self) -> str:
        """The key's name (for a log, its origin)."""
        return self._name

    @property
    def key_id(self) -> int:
        """The key id, ``SHA-256(name || 0x0A || 0x01 || public key)[:4]``."""
        return self._key_id

    @property
    def public_key(self) -> bytes:
        """The 32-byte Ed25519 public key."""
        return self._public_key

    @classmethod
    def from_vkey(cls, text: str) -> NoteVerifier:
        """The verifier of ``<name>+<hex id>+<base64(0x01 || public key)>``; :class:`MalformedKey`
        if the text is not of that form or its id is not the key's."""
        name, claimed_id, key = _split_key(text, "verifier key")
        verifier = cls(name, key[1:])
        if verifier.key_id != claimed_id:
            raise MalformedKey("the verifier key's id does not match its name and key")
        return verifier

    @property
    def vkey(self) -> str:
        """The verifier key's text, to publish."""
        key = base64text.encode(bytes([ED25519]) + self.public_key)
        return f"{self.name}+{self.key_id:08x}+{key}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Whether ``signature`` is this key's Ed25519 signature of ``message``."""
        if len(signature) != 64:
            return False
        try:
            self._key.verify(signature, message)
        except CryptographyInvalidSignature:
            return False
        return True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NoteVerifier) and self.vkey == other.vkey

    def __hash__(self) -> int:
        return hash(self.vkey)

    def __repr__(self) -> str:
        return f"NoteVerifier({self.vkey!r})"


class NoteSigner:
    """An Ed25519 signer key. Its text (:meth:`skey`) is the secret: it never shows in a repr."""

    __slots__ = ("_key", "_verifier")

    def __init__(self, name: str, seed: bytes) -> None:
        if not isinstance(seed, bytes) or len(seed) != 32:
            raise MalformedKey("an Ed25519 private key seed is 32 bytes")
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        self._verifier = NoteVerifier(name, self._key.public_key().public_bytes_raw())

    @property
    def name(self) -> str:
        """The key's name (for a log, its origin)."""
        return self._verifier.name

    @property
    def key_id(self) -> int:
        """The key id, the same as its verifier's."""
        return self._verifier.key_id

    @property
    def verifier(self) -> NoteVerifier:
        """The public half, to publish as :attr:`NoteVerifier.vkey`."""
        return self._verifier

    @classmethod
    def generate(cls, name: str) -> NoteSigner:
        """A new random key named ``name`` (from the operating system's random source)."""
        return cls(name, Ed25519PrivateKey.generate().private_bytes_raw())

    @classmethod
    def from_skey(cls, text: str) -> NoteSigner:
        """The signer of ``PRIVATE+KEY+<name>+<hex id>+<base64(0x01 || seed)>``;
        :class:`MalformedKey` if the text is not of that form or its id is not the key's."""
        if not isinstance(text, str) or not text.startswith(_PRIVATE_PREFIX):
            raise MalformedKey("a signer key starts with PRIVATE+KEY+")
        name, claimed_id, key = _split_key(text[len(_PRIVATE_PREFIX) :], "signer key")
        signer = cls(name, key[1:])
        # The id names the public key, which only exists once derived from the seed.
        if signer.key_id != claimed_id:
            raise MalformedKey("the signer key's id does not match its name and key")
        return signer

    def skey(self) -> str:
        """The signer key's secret text, to keep in settings or a secret store."""
        seed = bytes([ED25519]) + self._key.private_bytes_raw()
        return f"{_PRIVATE_PREFIX}{self.name}+{self.key_id:08x}+{base64text.encode(seed)}"

    def sign(self, message: bytes) -> bytes:
        """The Ed25519 signature of ``message`` (deterministic, RFC 8032)."""
        return self._key.sign(message)

    def __repr__(self) -> str:
        return f"NoteSigner(name={self.name!r}, key_id={self.key_id:08x})"


def generate_key(name: str) -> tuple[str, str]:
    """A new Ed25519 key pair for ``name``: ``(signer key, verifier key)`` texts."""
    signer = NoteSigner.generate(name)
    return signer.skey(), signer.verifier.vkey
