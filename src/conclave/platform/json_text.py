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
