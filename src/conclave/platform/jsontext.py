"""Compact JSON text for the hot paths, with encoders made once, and the JSON response every
service answers with.

``json.dumps`` with any non-default option builds a new ``JSONEncoder`` per call, which costs a
quarter of serialising a small document; these are built once, with the options their callers
used before, so the text is the same. :func:`json_encoder` and :func:`json_decoder` go one step
further for loops that encode many small documents (a bulk discovery encodes every record several
times: its content hash, its stored text, its inspection): the standard library's C encoder and
scanner, built once, giving exactly the text and values of ``json.dumps`` and ``json.loads``.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any

from starlette.responses import JSONResponse

from conclave.platform.inputs import escape_unsafe

log = logging.getLogger(__name__)

COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""UTF-8 text, no spaces (:data:`compact_text` writes the same, faster, where it is hot)."""


class CompactJSONResponse(JSONResponse):
    """Starlette's ``JSONResponse`` (same bytes: UTF-8, no spaces, NaN refused), encoder made
    once, that still answers when the content holds a value JSON text cannot carry.

    Such a value (a lone surrogate, NaN) comes from a row stored before the boundary refused it, or
    through a path that slipped: one such row must not fail a list for everyone who reads it. It
    is sent escaped (:func:`~conclave.platform.inputs.escape_unsafe`); clean content pays nothing
    for this (the escape runs only once encoding has failed)."""

    def render(self, content: Any) -> bytes:
        try:
            return _response_text(content).encode("utf-8")
        except ValueError as exc:  # UnicodeEncodeError, or a non-finite number
            log.warning("response held unencodable values; sent escaped", extra={"error": str(exc)})
            return _response_text(escape_unsafe(content)).encode("utf-8")


# None on an interpreter without the C accelerator: json.dumps it is, then.
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)

# What json.loads skips after a value (str.strip would also take \x0c, \u2028, ...).
_JSON_WHITESPACE = " \t\n\r"

# What the fast encoder must write exactly as json.dumps does before it is used.
_PROBE: Any = {"b": [1.5, -0.0, 1e16, 2**70, True, None], "a": {'é\n\x00\ud800"': "\\/"}}


def json_encoder(
    *,
    sort_keys: bool = False,
    separators: tuple[str, str] | None = None,
    ensure_ascii: bool = True,
    default: Callable[[Any], Any] | None = None,
    allow_nan: bool = True,
    same_errors: bool = False,
) -> Callable[[Any], str]:
    """A function giving ``json.dumps(value, sort_keys=..., separators=..., ensure_ascii=...,
    default=..., allow_nan=...)`` with the same text (or the same error), from one encoder built
    now.

    One difference: a value that contains itself raises ``RecursionError`` instead of
    ``ValueError``, and only once it has been written out again at every level up to the
    recursion limit (the encoder keeps no record of the containers it is in). With
    ``same_errors`` the C encoder is made for each call with a record of its own, as
    ``json.dumps`` does: such a value is refused with ``ValueError`` as soon as it is met again
    (a plug-in's tree with a parent link cost seconds of CPU and hundreds of MiB before), and no
    record is shared between threads; still cheaper than ``json.dumps``, which also builds a
    ``JSONEncoder``. Values that come from JSON, never circular, can take the faster encoder.
    Falls back to ``json.dumps`` itself where the C encoder is not available or does not write
    the probe document exactly as ``json.dumps`` does.
    """
    options: dict[str, Any] = {
        "sort_keys": sort_keys,
        "separators": separators,
        "ensure_ascii": ensure_ascii,
        "default": default,
        "allow_nan": allow_nan,
    }
    slow: Callable[[Any], str] = functools.partial(json.dumps, **options)
    if _c_make_encoder is None:
        return slow
    settings = json.JSONEncoder(**options)
    text = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    # The C encoder's arguments after its record of containers: no indent, no skipkeys.
    rest: tuple[Any, ...] = (settings.default, text, None, settings.key_separator)
    rest += (settings.item_separator, sort_keys, False, allow_nan)
    try:
        encode = _c_make_encoder(None, *rest)  # no record: see above

        def fast(value: Any) -> str:
            return "".join(encode(value, 0))

        def checked(value: Any) -> str:
            return "".join(_c_make_encoder({}, *rest)(value, 0))

        chosen = checked if same_errors else fast
        if chosen(_PROBE) != slow(_PROBE):
            return slow
    except (TypeError, ValueError):  # another Python's encoder takes other arguments
        return slow
    return chosen


compact_text = json_encoder(ensure_ascii=False, separators=(",", ":"), same_errors=True)
"""``COMPACT.encode``: the same text and errors, from an encoder built once (an event's payload
and an MCP answer are encoded once per governed call)."""

_response_text = json_encoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), same_errors=True
)


def json_decoder() -> Callable[[str], Any]:
    """A function giving ``json.loads(text)`` for a text: the same value, or the same error.

    The text goes straight to the standard library's scanner; only a text the scanner does not
    take whole (JSON whitespace after the value is fine) goes through ``json.loads``, for its
    exact answer or error."""
    # Set by JSONDecoder.__init__ (the C scanner where there is one), though not in the stubs.
    scan: Callable[[str, int], tuple[Any, int]] = json.decoder.JSONDecoder().scan_once  # type: ignore[attr-defined]
    loads = json.loads

    def decode(text: str) -> Any:
        try:
            value, end = scan(text, 0)
        except (StopIteration, ValueError, RecursionError):
            return loads(text)
        if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
            return loads(text)
        return value

    return decode
