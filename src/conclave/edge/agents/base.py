"""What every intake agent shares: its failure vocabulary and JSON-safe output.

Agents run in parser worker processes (see :mod:`conclave.edge.parsing`), so they raise plain
exceptions that cross the process boundary as a kind and a message, never HTTP errors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, overload

from conclave.platform.inputs import INT_MAX, INT_MIN, escape_text

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_MAX_STRING = 512
_MAX_ITEMS = 500


class CorruptMedia(Exception):
    """The file has the right signature but its parser cannot make sense of it (422)."""


class MediaMismatch(Exception):
    """Looking inside shows the file is not of the route's type after all (415)."""


# An agent cleans its whole summary (a mapping, so a dict comes back); the recursion, any value.
@overload
def clean(value: Mapping[Any, Any]) -> dict[str, Any]: ...
@overload
def clean(value: object, depth: int) -> Any: ...
def clean(value: Any, depth: int = 0) -> Any:
    """Make parser output safe to store, publish and answer as JSON: bounded strings and lists,
    finite numbers and 64-bit integers, no control characters, lone surrogates escaped — in keys
    too (EXIF and PDF metadata carry arbitrary bytes; a GeoJSON file any JSON string)."""
    if depth > 8:
        return None
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if INT_MIN <= value <= INT_MAX else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        return _text(value, _MAX_STRING)
    if isinstance(value, Mapping):
        return {
            _text(str(key), 128): clean(item, depth + 1)
            for key, item in list(value.items())[:_MAX_ITEMS]
        }
    if isinstance(value, list | tuple | set):
        return [clean(item, depth + 1) for item in list(value)[:_MAX_ITEMS]]
    try:
        return clean(float(value), depth + 1)  # Pillow's IFDRational, Fraction, Decimal
    except (TypeError, ValueError, ZeroDivisionError):
        return clean(str(value), depth + 1)


def _text(value: str, limit: int) -> str:
    return escape_text(_CONTROL.sub("", value)[:limit])


def bbox_of(points: list[tuple[float, float]]) -> list[float] | None:
    """``[min_x, min_y, max_x, max_y]`` of ``points`` (x = longitude), or ``None`` when empty."""
    if not points:
        return None
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    return [min(xs), min(ys), max(xs), max(ys)]
