"""The name an upstream tool is served under: ``<server>__<tool>``, provider-safe and stable.

Model providers accept tool names matching ``^[a-zA-Z0-9_-]{1,64}$``, and MCP clients hand the
names they list to them. An upstream's tool names are whatever that server chose (dots, spaces,
emoji, 200 characters), so:

- ``<server>__<tool>`` is used as it is when it already obeys the rule and no other tool of the
  gateway is called that;
- otherwise (a character outside the rule, longer than 64, or taken by a built-in, a plug-in or
  another upstream's tool) it becomes ``<sanitised, cut to 55>_<8 hex of sha256(server NUL
  tool)>``. The suffix depends only on the server's and the tool's names, so every replica and
  every restart computes the same alias, and two names that sanitise alike still differ.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

_STRICT = re.compile(r"^[a-zA-Z0-9_-]{1,64}\Z")
_OUTSIDE = re.compile(r"[^a-zA-Z0-9_-]")
SEPARATOR = "__"


def _hashed(server: str, tool: str, salt: int) -> str:
    stem = _OUTSIDE.sub("_", f"{server}{SEPARATOR}{tool}")[:55]
    material = f"{server}\x00{tool}" + (f"\x00{salt}" if salt else "")
    digest = hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{stem}_{digest}"


def upstream_alias(server: str, tool: str, taken: Callable[[str], bool]) -> str:
    """The alias of ``tool`` of upstream ``server``; ``taken(name)`` says whether another tool of
    the gateway answers to ``name`` already."""
    plain = f"{server}{SEPARATOR}{tool}"
    if _STRICT.match(plain) and not taken(plain):
        return plain
    for salt in range(4):  # a second collision after hashing would take a sha256 accident
        alias = _hashed(server, tool, salt)
        if not taken(alias):
            return alias
    raise ValueError(f"no free alias for tool {tool[:64]!r} of upstream {server!r}")
