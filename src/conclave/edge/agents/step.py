"""STEP physical files (ISO 10303-21; IFC uses the same encoding): header facts and instance count.

Both are read with a small tokenizer rather than regular expressions over lines: strings
(``'...'``, a quote doubled inside) and comments (``/* ... */``) may hold any of ``( ) , ; # =``,
and an entity may span lines, so a line that starts with ``#12`` is not necessarily an instance.
"""

from __future__ import annotations

import re
from typing import Any

HEADER_BYTES = 256 * 1024
"""How much of the file's start is read for its HEADER section (a few hundred bytes in practice)."""
_CHUNK = 1 << 20
_MAX_PENDING = 4096
_MAX_HEADER_TOKENS = 20_000

_TOKEN = re.compile(
    r"\s+|/\*.*?(?:\*/|\Z)|'(?:[^']|'')*(?:'|\Z)|[A-Za-z_][A-Za-z0-9_\-]*|[(),;=]|[^\s'(),;=/]+|/",
    re.DOTALL,
)
_INSTANCE = re.compile(rb"#\d+\s*=")
_INSTANCE_PREFIX = re.compile(rb"#\d*\s*\Z")
_NEXT_TOKEN = re.compile(rb"'|/\*|;")
_SPACE = re.compile(rb"[\s;]*")  # an empty statement leaves the next one at its start
_X2 = re.compile(
    r"\\X2\\((?:[0-9A-Fa-f]{4})*)\\X0\\"  # UTF-16 code units
    r"|\\X4\\((?:[0-9A-Fa-f]{8})*)\\X0\\"  # UTF-32 code points
    r"|\\X\\([0-9A-Fa-f]{2})"  # one ISO 8859-1 character
)


def _decode(literal: str) -> str:
    """A STEP string literal's text: doubled quotes undone, ``\\X\\``, ``\\X2\\`` and ``\\X4\\``
    escapes (ISO 8859-1, UTF-16 and UTF-32 code points in hex) decoded."""

    def code_points(match: re.Match[str]) -> str:
        if match.group(3) is not None:
            return chr(int(match.group(3), 16))
        digits, width = (match.group(1), 4) if match.group(1) is not None else (match.group(2), 8)
        units = [int(digits[i : i + width], 16) for i in range(0, len(digits), width)]
        if width == 4:
            raw = b"".join(unit.to_bytes(2, "big") for unit in units)
            return raw.decode("utf-16-be", "replace")
        return "".join(chr(u) if u <= 0x10FFFF else "\ufffd" for u in units)

    text = literal[1:-1] if literal.endswith("'") and len(literal) > 1 else literal[1:]
    return _X2.sub(code_points, text.replace("''", "'")).replace("\\\\", "\\")


def _header_calls(text: str) -> dict[str, list[Any]]:
    """The HEADER section's entries (``FILE_NAME(...)``) as parameter lists; a string parameter is
    its decoded text, a list is a Python list, anything else (``$``, ``*``, numbers) a string."""
    calls: dict[str, list[Any]] = {}
    stack: list[list[Any]] = []
    name = None
    for count, match in enumerate(_TOKEN.finditer(text)):
        token = match.group()
        if count > _MAX_HEADER_TOKENS:
            break
        if token[0].isspace() or token.startswith("/*"):
            continue
        if token == "(":
            stack.append([])
        elif token == ")" and stack:
            done = stack.pop()
            if stack:
                stack[-1].append(done)
            elif name is not None:
                calls.setdefault(name, done)
                name = None
        elif token == ";" and not stack:
            name = None
        elif token in (",", ";", ")", "="):
            continue
        elif stack:
            stack[-1].append(_decode(token) if token.startswith("'") else token)
        else:
            name = token.upper()
    return calls


def _first_string(value: Any) -> str | None:
    while isinstance(value, list) and value:
        value = value[0]
    return value if isinstance(value, str) and value else None


def _header(path: str) -> dict[str, Any]:
    with open(path, "rb") as stream:
        head = stream.read(HEADER_BYTES)
    head = head[: head.find(b"ENDSEC")] if b"ENDSEC" in head else head
    try:
        text = head.decode("utf-8")  # allowed since the 2016 edition; older files are 8859-1
    except UnicodeDecodeError:
        text = head.decode("latin-1")
    start = re.search(r"\bHEADER\s*;", text)
    calls = _header_calls(text[start.end() :] if start else "")
    # FILE_NAME(name, time_stamp, author, organization, preprocessor_version,
    # originating_system, authorization)
    file_name = calls.get("FILE_NAME", [])
    system = file_name[5] if len(file_name) > 5 and isinstance(file_name[5], str) else None
    return {
        "schema": _first_string(calls.get("FILE_SCHEMA")),
        "originating_system": system if system and system != "$" else None,
    }


class InstanceCounter:
    """Counts entity instances (``#<digits> =`` opening a statement) in a stream of chunks, outside
    strings and comments, in constant memory: only a short undecided tail is carried over."""

    def __init__(self) -> None:
        self.count = 0
        self._state = "code"  # or "string", "comment"
        self._at_start = True  # no content since the last ";" (or the file's start)
        self._carry = b""

    def feed(self, chunk: bytes) -> None:
        data = self._carry + chunk
        self._carry = b""
        position, end = 0, len(data)
        while position < end:
            if self._state == "string":
                close = data.find(b"'", position)
                if close < 0:
                    return
                position, self._state = close + 1, "code"  # '' inside: closes and reopens
            elif self._state == "comment":
                close = data.find(b"*/", position)
                if close < 0:
                    self._carry = data[-1:] if data.endswith(b"*") else b""
                    return
                position, self._state = close + 2, "code"
            elif self._at_start:
                position = _SPACE.match(data, position).end()  # type: ignore[union-attr]
                if position == end:
                    return
                instance = _INSTANCE.match(data, position)
                if instance:
                    self.count += 1
                    self._at_start = False
                    position = instance.end()
                elif data.startswith(b"/*", position):
                    position, self._state = position + 2, "comment"
                elif end - position <= _MAX_PENDING and (
                    # Compared in place: slicing the rest of the chunk at every statement would
                    # make a chunk of ";" quadratic.
                    _INSTANCE_PREFIX.match(data, position)
                    or (position == end - 1 and data[position] == ord("/"))
                ):
                    self._carry = data[position:]  # undecided until the next chunk
                    return
                else:
                    self._at_start = False
            else:
                token = _NEXT_TOKEN.search(data, position)
                if token is None:
                    self._carry = data[-1:] if data.endswith(b"/") else b""
                    return
                position = token.end()
                if token.group() == b"'":
                    self._state = "string"
                elif token.group() == b"/*":
                    self._state = "comment"
                else:
                    self._at_start = True


def summary(path: str) -> dict[str, Any]:
    """Schema, originating system and entity instance count of a STEP or IFC file."""
    counter = InstanceCounter()
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            counter.feed(chunk)
    return {**_header(path), "entity_instances": counter.count}
