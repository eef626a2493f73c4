"""Values that no Conclave store, bus or response can carry, refused at the boundary.

Python's ``json`` module accepts things that break every later step of a request:

* a lone surrogate (``"\\ud800"``) is a ``str`` that cannot be encoded as UTF-8, so the response,
  the Redis publish and any UTF-8 file fail after the row is committed;
* NUL (``"\\u0000"``) is refused by PostgreSQL's ``text`` and ``jsonb``, but not by SQLite;
* ``NaN``, ``Infinity`` and ``1e309`` (which overflows to infinity) have no JSON representation,
  so strict parsers (browsers, other SDKs) refuse the document we would emit;
* integers outside the signed 64-bit range fit no integer column, no Qdrant payload and lose
  precision in every JavaScript client.

:func:`find_unsafe` finds the first such value in a decoded document (keys included) and says
where; :func:`loads_checked` decodes a JSON body and raises :class:`UnsafeInput` (422
``UNSAFE_INPUT``) when it holds one; :func:`escape_unsafe` turns a document into one that can be
stored, for audit rows that must record what was refused.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from conclave.platform.errors import Unprocessable
from conclave.platform.problem_types import ProblemCode

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1


@dataclass(frozen=True)
class UnsafeValue:
    """Where an unsafe value is (``location`` as a path of keys and indexes) and what it is."""

    location: tuple[str | int, ...]
    kind: str  # "lone_surrogate" | "nul" | "non_finite_number" | "integer_out_of_range"
    # | "invalid_utf8" (raw bytes, from :func:`decode_checked`)

    @property
    def field(self) -> str:
        """The location as dotted text (``body.args.message``)."""
        return ".".join(str(part) for part in self.location)

    @property
    def message(self) -> str:
        """A sentence for the problem's ``errors`` entry."""
        return _MESSAGES[self.kind]


_MESSAGES = {
    "lone_surrogate": "Text holds a lone surrogate (not a Unicode scalar value).",
    "nul": "Text holds a NUL character.",
    "non_finite_number": "Numbers must be finite (no NaN, Infinity or overflowing exponents).",
    "integer_out_of_range": "Integers must fit in 64 bits.",
    "invalid_utf8": "Text is not valid UTF-8.",
}


class UnsafeInput(Unprocessable):
    """422 ``UNSAFE_INPUT``: the input holds a value that cannot be stored, published or answered.
    ``document`` is the decoded input, for callers that must audit what they refused."""

    code = ProblemCode.UNSAFE_INPUT

    def __init__(self, finding: UnsafeValue, document: Any = None) -> None:
        super().__init__(
            f"{finding.field}: {finding.message}",
            errors=[{"field": finding.field, "message": finding.message, "type": finding.kind}],
        )
        self.finding = finding
        self.document = document


def text_problem(text: str) -> str | None:
    """The kind of unsafe content in ``text`` (``lone_surrogate`` or ``nul``), or ``None``."""
    if "\x00" in text:
        return "nul"
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "lone_surrogate"
    return None


def _scalar_problem(value: Any) -> str | None:
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, float):
        return None if math.isfinite(value) else "non_finite_number"
    if isinstance(value, int) and not isinstance(value, bool):
        return None if INT_MIN <= value <= INT_MAX else "integer_out_of_range"
    return None


def find_unsafe(document: Any, prefix: tuple[str | int, ...] = ()) -> UnsafeValue | None:
    """The first unsafe value (or key) in ``document``, depth first, or ``None``.

    Iterative, so a deeply nested document cannot exhaust the interpreter's stack."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [(prefix, document)]
    while stack:
        location, value = stack.pop()
        if isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                key_text = str(key)
                kind = _scalar_problem(key)
                if kind is not None:
                    return UnsafeValue((*location, escape_text(key_text)), kind)
                stack.append(((*location, key_text), item))
        elif isinstance(value, (list, tuple)):
            for index in range(len(value) - 1, -1, -1):
                stack.append(((*location, index), value[index]))
        else:
            kind = _scalar_problem(value)
            if kind is not None:
                return UnsafeValue(location, kind)
    return None


def holds_unsafe(document: Any) -> bool:
    """Whether :func:`find_unsafe` finds something in ``document``: the same test, several times
    faster on JSON documents because it does not work out where (a bulk load checks every
    item it reads)."""
    try:
        return _holds_unsafe(document)
    except RecursionError:  # nested beyond the interpreter's stack: the iterative walk
        return find_unsafe(document) is not None


def _text_unsafe(text: str) -> bool:
    return "\x00" in text or (not text.isascii() and text_problem(text) is not None)


def _holds_unsafe(value: Any) -> bool:
    # The JSON types are told apart by exact type, inline, for speed; anything else (a
    # subclass, a tuple, a value of a plug-in's own type) takes find_unsafe's own path.
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if (_text_unsafe(key) if type(key) is str else _scalar_problem(key) is not None) or (
                _item_unsafe(item)
            ):
                return True
        return False
    if kind is list:
        return any(_item_unsafe(item) for item in value)
    return find_unsafe(value) is not None


def _item_unsafe(item: Any) -> bool:
    kind = type(item)
    if kind is str:
        return _text_unsafe(item)
    if kind is int:
        return not INT_MIN <= item <= INT_MAX
    if kind is float:
        return not math.isfinite(item)
    if item is None or kind is bool:
        return False
    return _holds_unsafe(item)


def check_safe(document: Any, prefix: tuple[str | int, ...] = ()) -> None:
    """Raise :class:`UnsafeInput` if ``document`` holds an unsafe value."""
    # Every request body is checked: the faster test first, the walk that says where only when
    # it finds something (they agree: tests/platform/test_inputs.py).
    if not holds_unsafe(document):
        return
    finding = find_unsafe(document, prefix)
    if finding is not None:
        raise UnsafeInput(finding, document)


def loads_checked(body: bytes | str, prefix: tuple[str | int, ...] = ("body",)) -> Any:
    """Decode a JSON body; ``ValueError``/``RecursionError`` when it is not JSON,
    :class:`UnsafeInput` when it holds an unsafe value."""
    document = json.loads(body)
    check_safe(document, prefix)
    return document


def decode_checked(raw: bytes, location: tuple[str | int, ...]) -> str:
    """``raw`` (a form field, say) decoded as UTF-8; :class:`UnsafeInput` when it is not UTF-8
    (``invalid_utf8``: encoded surrogates included, so no lone surrogate gets through) or holds
    NUL. Decoding with replacement instead would store a silently altered value."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UnsafeInput(UnsafeValue(location, "invalid_utf8")) from None
    if "\x00" in text:
        raise UnsafeInput(UnsafeValue(location, "nul"))
    return text


def escape_text(text: str) -> str:
    """``text`` with lone surrogates and NUL written as ``\\uXXXX`` escapes (storable)."""
    if text_problem(text) is None:
        return text
    return "".join(
        f"\\u{ord(char):04x}" if char == "\x00" or 0xD800 <= ord(char) <= 0xDFFF else char
        for char in text
    )


def escape_unsafe(document: Any) -> Any:
    """A copy of ``document`` that can be stored and encoded: unsafe text escaped, non-finite
    numbers and out-of-range integers as their text (``"NaN"``, ``"Infinity"``, digits)."""
    try:
        return _escaped(document)
    except RecursionError:
        return TOO_DEEP_TO_RECORD


TOO_DEEP_TO_RECORD = "(document nested too deeply to record)"


def _escaped(document: Any) -> Any:
    if isinstance(document, dict):
        return {escape_text(str(key)): _escaped(value) for key, value in document.items()}
    if isinstance(document, (list, tuple)):
        return [_escaped(item) for item in document]
    if isinstance(document, str):
        return escape_text(document)
    kind = _scalar_problem(document)
    if kind == "non_finite_number":
        return repr(document).replace("inf", "Infinity").replace("nan", "NaN")
    if kind == "integer_out_of_range":
        return str(document)
    return document
