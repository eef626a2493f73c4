"""What the services that log their records share about an entry: the canonical JSON every
versioned entry format is written in, the hashes that stand in for values a reader must not see,
and where a leaf's receipt is served.

A service's entry (the gateway's ``conclave.call/v1``, the edge's ``conclave.pack/v1``) is
rebuilt from its stored row to be checked against the log, so its serialisation must have exactly
one spelling: sorted keys, no white space, ASCII only (``\\uXXXX`` escapes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from conclave.platform.auth import Principal
from conclave.platform.jsontext import json_decoder, json_encoder

# Built once: a call's entry hashes four values, each encoded twice and decoded once.
_canonical_text = json_encoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str
)
_stored_text = json_encoder(default=str)
_decoded = json_decoder()


def canonical_json(value: Any) -> bytes:
    """``value`` as canonical JSON: sorted keys, no white space, ASCII only. Values JSON cannot
    hold (the stored rows never hold one) are written as their ``str``."""
    return _canonical_text(value).encode("ascii")


def sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data``, as 64 lowercase hexadecimal digits."""
    return hashlib.sha256(data).hexdigest()


def text_sha256(text: str) -> str:
    """SHA-256 (hex) of ``text`` in UTF-8; a lone surrogate is encoded as is rather than
    refused, so every stored string has a hash (an id, a key)."""
    return sha256_hex(text.encode("utf-8", "surrogatepass"))


def stored_form(value: Any) -> Any:
    """``value`` as a JSON column keeps it and hands it back: mapping keys are strings there (a
    mapping ``{2: "a", 10: "b"}`` is read back as ``{"2": "a", "10": "b"}``, which sorts the
    other way), so a mapping with keys of mixed types can be sorted too."""
    return _decoded(_stored_text(value))


def optional_text_sha256(text: str | None) -> str | None:
    """:func:`text_sha256` of ``text``, or None for None (a field left empty)."""
    return None if text is None else text_sha256(text)


def optional_json_sha256(value: Any) -> str | None:
    """:func:`json_sha256` of ``value``, or None for None."""
    return None if value is None else json_sha256(value)


def json_sha256(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of ``value`` as a JSON column keeps it
    (:func:`stored_form`): the hash of a row's value is the same before and after storing it."""
    if type(value) is list and not value:  # most calls' warnings (a subclass's truth may raise)
        return _EMPTY_LIST_SHA256
    if _stored_as_it_is(value, _LOOK_AT_MOST) < 0:
        value = stored_form(value)
    return sha256_hex(canonical_json(value))


# Values storing leaves as they are: text, numbers, true, false, null, and lists and objects of
# them, the objects with text keys (a key ``2`` is read back as ``"2"``, which sorts otherwise).
# Anything else (a tuple, an enum, a value written as its ``str``) makes the round trip. Looking
# is cheaper than the round trip only for small values, as most arguments and results are.
_AS_STORED = frozenset({str, int, float, bool, type(None)})
_LOOK_AT_MOST = 64


def _surrogates(key: str) -> bool:
    # Storing joins a surrogate pair written as two code points into one character, which sorts
    # elsewhere among the keys (and may then equal another key): such a key makes the round trip.
    return any("\ud800" <= character <= "\udfff" for character in key)


def _stored_as_it_is(value: Any, budget: int) -> int:
    """``budget`` less the values looked at in ``value``; below zero when ``value`` may change
    by storing it or holds more than ``budget`` values."""
    kind = type(value)
    if kind in _AS_STORED:
        return budget - 1
    if kind is dict:
        budget -= 1
        for key, item in value.items():
            if type(key) is not str or budget < 0 or (not key.isascii() and _surrogates(key)):
                return -1
            budget = _stored_as_it_is(item, budget)
        return budget
    if kind is list:
        budget -= 1
        for item in value:
            if budget < 0:
                return -1
            budget = _stored_as_it_is(item, budget)
        return budget
    return -1


_EMPTY_LIST_SHA256 = sha256_hex(b"[]")


def owner_reads(owner_field: str) -> Callable[[Principal, bytes], bool]:
    """A leaf policy (:class:`~conclave.platform.tlog.published.PublishedLogs`): operators read
    every leaf's data, and a caller the leaves whose ``owner_field`` is the SHA-256 of their own
    id (:func:`text_sha256`), as the gateway's calls and the edge's packs record their user and
    device."""

    def may_read(principal: Principal, data: bytes) -> bool:
        if principal.is_operator:
            return True
        try:
            entry = json.loads(data)
        except ValueError:
            return False
        return isinstance(entry, dict) and entry.get(owner_field) == text_sha256(principal.user_id)

    return may_read


def receipt_path(log_name: str, hashed: bytes) -> str:
    """Where the receipt of the leaf whose leaf hash is ``hashed`` is served, relative to the
    service that publishes the log ``log_name`` (``tlog_router``)."""
    return f"/logs/{log_name}/receipt/by-hash/{hashed.hex()}"
