"""Recognising credentials in documents a caller sent, to keep them out of what is shown.

A key whose name looks like it holds a credential (``Authorization``, ``X-Api-Key``,
``password``, ``client_secret``, ``Cookie``, …) is redacted wherever a stored document is shown,
logged or published. A secret *reference*, ``{"secret": "<name>"}``, is a name and stays.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"
# Compared against the key with case and separators removed ("X-Api-Key" -> "xapikey").
_CREDENTIAL_WORDS = re.compile(
    r"token|secret|passw(or)?d|passphrase|apikey|credential|privatekey|accesskey|sessionid|cookie|signature"
)
_CREDENTIAL_KEYS = frozenset({"auth", "authorization", "proxyauthorization", "xauth", "bearer"})


def is_credential_key(key: object) -> bool:
    """Whether a parameter or header name looks like it holds a credential."""
    normalised = re.sub(r"[^a-z0-9]", "", str(key).lower())
    return normalised in _CREDENTIAL_KEYS or _CREDENTIAL_WORDS.search(normalised) is not None


def is_reference(value: object) -> bool:
    """Whether ``value`` is a secret reference, ``{"secret": "<name>"}``."""
    return (
        isinstance(value, dict)
        and set(value) == {"secret"}
        and isinstance(value["secret"], str)
        and bool(value["secret"])
    )


def redact(document: Any) -> Any:
    """A copy of ``document`` in which what credential-looking keys hold is ``[redacted]``
    (references stay: they are names, not values). Iterative over any nesting depth."""
    root: list[Any] = [None]
    stack: list[tuple[Any, list[Any] | dict[Any, Any], Any]] = [(document, root, 0)]
    while stack:
        value, parent, slot = stack.pop()
        if isinstance(value, dict) and not is_reference(value):
            copy: dict[Any, Any] = {}
            parent[slot] = copy
            for key, item in value.items():
                if is_credential_key(key) and not is_reference(item):
                    copy[key] = REDACTED
                else:
                    stack.append((item, copy, key))
        elif isinstance(value, list):
            items: list[Any] = [None] * len(value)
            parent[slot] = items
            stack.extend((item, items, index) for index, item in enumerate(value))
        else:
            parent[slot] = value
    return root[0]
