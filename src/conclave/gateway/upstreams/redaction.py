"""Keeping the credentials an upstream connection presents out of every text it leaves behind.

An upstream may echo what it was sent (an error quoting the token it refused, a debug tool
returning its request headers), and what it answers is answered, audited, published and logged.
:class:`Scrubber` replaces each credential a connection presents with ``[redacted]`` in those
texts, in the spellings an echo commonly takes:

- the text itself, and inside a JSON string (``"`` and ``\\`` escaped, ``/`` escaped or not,
  non-ASCII escaped or not, and JSON inside JSON);
- percent-encoded (``%XX``, and ``+`` for spaces), as a query string or a form echoes it;
- base64 (standard and URL-safe) at each of its three alignments: the run of base64 characters
  that encodes the credential wherever it sits in the encoded text (an echo of a Basic header,
  a JWT-like envelope). At most the two characters at either end, which also depend on the
  text around it, are left.

Texts are scrubbed before they are cut to a length, never after: a cut credential no longer
matches. What no spelling covers (a hash, another encryption, a credential cut by the upstream
itself) is a known limit (docs/security.md, "Upstream credentials at rest").
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

from conclave.platform.credentials import REDACTED

MIN_SECRET_CHARS = 8
"""Shorter values are not scrubbed (nor accepted as users' credentials): a two-letter one would
blank every such pair of letters in what the upstream answers."""


def _json_forms(text: str) -> set[str]:
    forms = set()
    for ensure_ascii in (True, False):
        escaped = json.dumps(text, ensure_ascii=ensure_ascii)[1:-1]
        forms |= {escaped, escaped.replace("/", "\\/")}
    return forms


def _base64_forms(secret: bytes) -> set[str]:
    forms = set()
    for offset in range(3):
        # The bytes from ``offset`` on, whole groups of three only: they encode to the same
        # characters wherever the surrounding text puts them on a group boundary.
        aligned = secret[offset:]
        aligned = aligned[: len(aligned) // 3 * 3]
        if len(aligned) < 6:
            continue
        encoded = base64.b64encode(aligned).decode()
        forms |= {encoded, encoded.replace("+", "-").replace("/", "_")}
    return forms


def secret_forms(secret: str) -> set[str]:
    """Every spelling of ``secret`` that :class:`Scrubber` replaces."""
    # Case-changed too: a client library may lower-case the header it quotes (the MCP SDK's
    # "Unexpected content type" does).
    forms = {secret, secret.lower(), secret.upper()}
    for escaped in _json_forms(secret):
        forms.add(escaped)
        forms |= _json_forms(escaped)  # JSON text inside a JSON string
    forms |= {quote(secret, safe=""), quote_plus(secret, safe="")}
    forms |= _base64_forms(secret.encode("utf-8", "surrogatepass"))
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


class Scrubber:
    """Replaces the given secrets (values shorter than :data:`MIN_SECRET_CHARS` and ``None``
    are skipped) with ``[redacted]`` in a text or in every string of a JSON-like value."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if secret and len(secret) >= MIN_SECRET_CHARS:
                forms |= secret_forms(secret)
        # Longest first: a longer spelling that contains a shorter one goes whole.
        self._forms = sorted(forms, key=lambda form: (-len(form), form))

    def __bool__(self) -> bool:
        return bool(self._forms)

    def text(self, text: str) -> str:
        """``text`` with every spelling of every secret replaced."""
        for form in self._forms:
            if form in text:
                text = text.replace(form, REDACTED)
        return text

    def cut(self, text: str, limit: int) -> str:
        """``text`` scrubbed, then cut to ``limit`` characters (in that order)."""
        return self.text(text)[:limit]

    def value(self, value: Any) -> Any:
        """A copy of ``value`` with its strings (keys included) scrubbed. Iterative: an
        upstream's result may nest as deep as its schema allows."""
        if not self._forms:
            return value
        root: list[Any] = [value]
        stack: list[tuple[Any, list[Any] | dict[Any, Any], Any]] = [(value, root, 0)]
        while stack:
            item, parent, slot = stack.pop()
            if isinstance(item, str):
                parent[slot] = self.text(item)
            elif isinstance(item, dict):
                copy: dict[Any, Any] = {}
                parent[slot] = copy
                for key, inner in item.items():
                    clean = self.text(key) if isinstance(key, str) else key
                    copy[clean] = None
                    stack.append((inner, copy, clean))
            elif isinstance(item, list):
                items: list[Any] = [None] * len(item)
                parent[slot] = items
                stack.extend((inner, items, index) for index, inner in enumerate(item))
            else:  # numbers, booleans, null: kept as they are
                parent[slot] = item
        return root[0]

    def extended(self, *secrets: str | None) -> Scrubber:
        """A scrubber of these secrets and ``secrets`` too."""
        more = Scrubber(secrets)
        combined = Scrubber()
        combined._forms = sorted(
            set(self._forms) | set(more._forms), key=lambda form: (-len(form), form)
        )
        return combined


NO_SECRETS = Scrubber()
"""A scrubber with nothing to scrub (a connection presenting no credential)."""
