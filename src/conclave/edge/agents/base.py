"""What every intake agent shares: its failure vocabulary and JSON-safe output.

Agents run in parser worker processes (see :mod:`conclave.edge.parsing`), so they raise plain
exceptions that cross the process boundary as a kind and a message, never HTTP errors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from conclave.platform.inputs import INT_MAX, INT_MIN, escape_text

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_MAX_STRING = 512
_MAX_ITEMS = 500


class CorruptMedia(Exception):
    """The file has the right signature but its parser cannot make sense of it (422)."""


class MediaMismatch(Exception):
    """Looking inside shows the file is not of the route's type after all (415)."""


_MAX_VALUES = 20_000
"""Values (scalars, keys) in one file's summary: with 500 items a list nested 8 deep, the per-list
bound alone would let a file fill a row and an event with megabytes of facts."""
_MAX_CHARACTERS = 256 * 1024
"""Characters of all strings and keys in one file's summary (500 layer names of 512 characters
were half a megabyte)."""


@dataclass
class _Budget:
    values: int = _MAX_VALUES
    characters: int = _MAX_CHARACTERS
    exhausted: bool = False

    def spend(self, characters: int = 0) -> bool:
        """Whether one more value (of ``characters``) still fits; marks the budget spent if not."""
        if self.values <= 0 or self.characters < characters:
            self.exhausted = True
            return False
        self.values -= 1
        self.characters -= characters
        return True


def clean(summary: Mapping[str, Any]) -> dict[str, Any]:
    """Make an agent's summary safe to store, publish and answer as JSON: bounded strings, lists
    and size in all, finite numbers and 64-bit integers, no control characters, lone surrogates
    escaped — in keys too (EXIF and PDF metadata carry arbitrary bytes; a GeoJSON file any JSON
    string). A summary cut to its budget says so with ``facts_truncated: true``."""
    budget = _Budget()
    cleaned: dict[str, Any] = _clean(summary, 0, budget)
    if budget.exhausted:
        cleaned["facts_truncated"] = True
    return cleaned


def _clean(value: Any, depth: int, budget: _Budget) -> Any:
    if depth > 8:
        return None
    if isinstance(value, bool) or value is None:
        return value
    # A subclass (numpy's scalars) becomes the plain number: its own comparisons are not
    # trusted, and nothing foreign is pickled back to the service process.
    if isinstance(value, int):
        number = int(value)
        return number if INT_MIN <= number <= INT_MAX else None
    if isinstance(value, float):
        real = float(value)
        return real if math.isfinite(real) else None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        text = _text(value, _MAX_STRING)
        return text if budget.spend(len(text)) else None
    if isinstance(value, Mapping):
        # Plain values first, so that a long list cannot crowd out the facts named after it
        # (format, width, ...); the keys keep their order.
        entries = [(_text(str(key), 128), item) for key, item in list(value.items())[:_MAX_ITEMS]]
        cleaned: dict[str, Any] = {}
        for nested in (False, True):
            for name, item in entries:
                if isinstance(item, Mapping | list | tuple | set) is nested and budget.spend(
                    len(name)
                ):
                    cleaned[name] = _clean(item, depth + 1, budget)
        return {name: cleaned[name] for name, _ in entries if name in cleaned}
    if isinstance(value, list | tuple | set):
        items = []
        for item in list(value)[:_MAX_ITEMS]:
            if not budget.spend():
                break
            cleaned_item = _clean(item, depth + 1, budget)
            if budget.exhausted and cleaned_item is None:
                break  # the item did not fit: the list ends here rather than in nulls
            items.append(cleaned_item)
        return items
    try:
        return _clean(float(value), depth + 1, budget)  # Pillow's IFDRational, Fraction, Decimal
    except (TypeError, ValueError, ZeroDivisionError):
        return _clean(str(value), depth + 1, budget)


def _text(value: str, limit: int) -> str:
    return escape_text(_CONTROL.sub("", value)[:limit])


_MAX_MESSAGE = 500


def error_text(error: BaseException) -> str:
    """What an agent's refusal says, made safe to answer and store (bounded, no control
    characters, lone surrogates escaped): a plug-in's message may quote the uploaded bytes."""
    try:
        text = str(error)
    except Exception:
        text = type(error).__name__
    return _text(text, _MAX_MESSAGE)


def bbox_of(points: list[tuple[float, float]]) -> list[float] | None:
    """``[min_x, min_y, max_x, max_y]`` of ``points`` (x = longitude), or ``None`` when empty."""
    if not points:
        return None
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    return [min(xs), min(ys), max(xs), max(ys)]
