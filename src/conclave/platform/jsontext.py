"""Compact JSON text for the hot paths, with encoders made once, and the JSON response every
service answers with.

``json.dumps`` with any non-default option builds a new ``JSONEncoder`` per call, which costs a
quarter of serialising a small document; these are built once, with the options their callers
used before, so the text is the same.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.responses import JSONResponse

from conclave.platform.inputs import escape_unsafe

log = logging.getLogger(__name__)

COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""UTF-8 text, no spaces: event payloads on the bus."""

_RESPONSE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class CompactJSONResponse(JSONResponse):
    """Starlette's ``JSONResponse`` (same bytes: UTF-8, no spaces, NaN refused), encoder made
    once, that still answers when the content holds a value JSON text cannot carry.

    Such a value (a lone surrogate, NaN) comes from a row stored before the boundary refused it, or
    through a path that slipped: one such row must not fail a list for everyone who reads it. It
    is sent escaped (:func:`~conclave.platform.inputs.escape_unsafe`); clean content pays nothing
    for this (the escape runs only once encoding has failed)."""

    def render(self, content: Any) -> bytes:
        try:
            return _RESPONSE.encode(content).encode("utf-8")
        except ValueError as exc:  # UnicodeEncodeError, or a non-finite number
            log.warning("response held unencodable values; sent escaped", extra={"error": str(exc)})
            return _RESPONSE.encode(escape_unsafe(content)).encode("utf-8")
