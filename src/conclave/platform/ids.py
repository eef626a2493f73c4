"""Random identifiers: request ids, call ids, event ids."""

from __future__ import annotations

import os


def new_id() -> str:
    """A random version-4 UUID in its usual text form, as ``str(uuid.uuid4())`` gives it.

    Written out because a governed call makes three (request, call and event id) and building a
    ``UUID`` object only to print it cost several times as much (docs/benchmarks.md).
    """
    digits = os.urandom(16).hex()
    variant = "89ab"[int(digits[16], 16) & 3]  # RFC 9562 variant bits 10xx
    return f"{digits[:8]}-{digits[8:12]}-4{digits[13:16]}-{variant}{digits[17:20]}-{digits[20:]}"
