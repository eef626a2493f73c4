"""``json.dumps`` without its set-up on every call, for loops that encode many small documents.

``json.dumps(value, sort_keys=True, ...)`` builds a ``JSONEncoder`` and then a C encoder for each
call, and for a record of a few fields that costs more than the encoding itself (a bulk discovery
encodes every record several times: its content hash, its stored text, its inspection). The
encoder made here is the same C encoder of the standard library, built once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

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
) -> Callable[[Any], str]:
    """A function giving ``json.dumps(value, sort_keys=..., separators=..., ensure_ascii=...)``
    with the same text, from one encoder built now.

    One difference: a value that contains itself raises ``RecursionError`` instead of
    ``ValueError`` (the encoder keeps no set of the containers it is in, which would have to be
    made anew for every call). Falls back to ``json.dumps`` itself where the C encoder is not
    available or does not write the probe document exactly as ``json.dumps`` does.
    """
    options: dict[str, Any] = {
        "sort_keys": sort_keys,
        "separators": separators,
        "ensure_ascii": ensure_ascii,
    }
    slow: Callable[[Any], str] = functools.partial(json.dumps, **options)
    if _c_make_encoder is None:
        return slow
    settings = json.JSONEncoder(**options)
    text = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    try:
        encode = _c_make_encoder(
            None,  # no markers: see above
            settings.default,
            text,
            None,  # no indent
            settings.key_separator,
            settings.item_separator,
            sort_keys,
            False,  # skipkeys
            True,  # allow_nan, as json.dumps
        )

        def fast(value: Any) -> str:
            return "".join(encode(value, 0))

        if fast(_PROBE) != slow(_PROBE):
            return slow
    except (TypeError, ValueError):  # another Python's encoder takes other arguments
        return slow
    return fast


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
