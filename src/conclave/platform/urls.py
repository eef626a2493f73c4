"""Building URLs from caller input: one value is one path segment, whatever it contains."""

from __future__ import annotations

from urllib.parse import quote

# Clients and servers resolve these segments (RFC 3986, section 5.2.4) even when every other
# character is quoted, which would move the request to another path; encoded, they are plain text.
_DOT_SEGMENTS = {".": "%2E", "..": "%2E%2E"}


def path_segment(value: object) -> str:
    """``value`` (as text) quoted to stay exactly one URL path segment: ``/``, ``?``, ``#``, ``%``
    and every other reserved character percent-encoded, and ``.``/``..`` encoded as well.
    ``ValueError`` for an empty value (the segment would vanish) or text that is not UTF-8."""
    text = str(value)
    if not text:
        raise ValueError("an empty value cannot be a URL path segment")
    quoted = quote(text, safe="")  # UnicodeEncodeError (a ValueError) for a lone surrogate
    return _DOT_SEGMENTS.get(quoted, quoted)
