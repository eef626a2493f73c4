"""Compact JSON text for the hot paths, with encoders made once.

``json.dumps`` with any non-default option builds a new ``JSONEncoder`` per call, which costs a
quarter of serialising a small document; these are built once, with the options their callers
used before, so the text is the same.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse

COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""UTF-8 text, no spaces: event payloads on the bus."""

_RESPONSE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class CompactJSONResponse(JSONResponse):
    """Starlette's ``JSONResponse`` (same bytes: UTF-8, no spaces, NaN refused), encoder made
    once."""

    def render(self, content: Any) -> bytes:
        return _RESPONSE.encode(content).encode("utf-8")
