"""JSON typed into a console form, read strictly: what the services could not carry is refused
here, with a message the form shows next to the field, before anything is sent.

``json.loads`` alone accepts ``NaN`` and ``Infinity``, a lone surrogate written as ``"\\ud800"``,
integers of any length and nesting as deep as the recursion limit; none of these is JSON a
service stores, and the deep or long ones cost the console time or a ``RecursionError``.
"""

from __future__ import annotations

import json
from typing import Any

MAX_JSON_CHARS = 64 * 1024
"""Longest JSON text a form field takes (a source list or parameters, not a data set)."""
MAX_DEPTH = 32
"""Deepest nesting of arrays and objects accepted."""
_MAX_INTEGER = 2**63 - 1


class JsonRefused(ValueError):
    """The text is not JSON the console sends; the message says why, for the form."""


def _no_constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not a JSON number; write a finite number.")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise JsonRefused(f"{text[:40]} is too large a number.")
    return value


def _bounded(text: str) -> int:
    if len(text.lstrip("-")) > 19:
        raise JsonRefused("An integer is at most 64 bits.")
    value = int(text)
    if not -_MAX_INTEGER - 1 <= value <= _MAX_INTEGER:
        raise JsonRefused("An integer is at most 64 bits.")
    return value


def parse_strict_json(text: str) -> Any:
    """``text`` as JSON, or :class:`JsonRefused` naming the problem."""
    if len(text) > MAX_JSON_CHARS:
        raise JsonRefused(f"At most {MAX_JSON_CHARS:,} characters.")
    _check_depth(text)
    try:
        value = json.loads(
            text, parse_constant=_no_constant, parse_float=_finite, parse_int=_bounded
        )
    except JsonRefused:
        raise
    except json.JSONDecodeError as exc:
        raise JsonRefused(f"Not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).") from exc
    except (ValueError, RecursionError) as exc:
        raise JsonRefused("Not JSON the services accept.") from exc
    _check_text(value)
    return value


def _check_depth(text: str) -> None:
    """Refuse deep nesting before parsing (a bracket inside a string counts too: a false refusal
    of a 32-deep string of brackets is a price worth paying for a parser that cannot recurse
    out of stack)."""
    depth = 0
    for char in text:
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise JsonRefused(f"Nested deeper than {MAX_DEPTH} levels.")
        elif char in "]}":
            depth -= 1


def _check_text(value: Any) -> None:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            _check_string(item)
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            for key, inner in item.items():
                _check_string(key)
                pending.append(inner)


def _check_string(text: str) -> None:
    if "\x00" in text:
        raise JsonRefused("A string holds a NUL character.")
    for char in text:
        if 0xD800 <= ord(char) <= 0xDFFF:
            raise JsonRefused("A string holds a lone surrogate (\\ud800-\\udfff).")
