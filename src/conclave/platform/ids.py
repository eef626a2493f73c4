"""Random identifiers: request ids, call ids, event ids."""

from __future__ import annotations

import os
from collections import deque

# Random bytes are read from the system a block at a time: one read per id was a system call per
# id, and a governed call makes three. The same bytes of os.urandom, handed out 16 at a time.
_BLOCK_BYTES = 4096
_ID_HEX_DIGITS = 32

# Hex digits of read, not yet used, ids. A deque because its popleft is atomic: threads that take
# ids at once never share one, and a thread refilling at the same time only adds fresh ones.
_unused: deque[str] = deque()

# A forked child must not hand out the ids its parent will hand out too.
os.register_at_fork(after_in_child=_unused.clear)


def _random_hex() -> str:
    while True:
        try:
            return _unused.popleft()
        except IndexError:
            block = os.urandom(_BLOCK_BYTES).hex()
            _unused.extend(
                block[start : start + _ID_HEX_DIGITS]
                for start in range(0, len(block), _ID_HEX_DIGITS)
            )


def new_id() -> str:
    """A random version-4 UUID in its usual text form, as ``str(uuid.uuid4())`` gives it.

    Written out because a governed call makes three (request, call and event id) and building a
    ``UUID`` object only to print it cost several times as much (docs/benchmarks.md).
    """
    digits = _random_hex()
    variant = "89ab"[int(digits[16], 16) & 3]  # RFC 9562 variant bits 10xx
    return f"{digits[:8]}-{digits[8:12]}-4{digits[13:16]}-{variant}{digits[17:20]}-{digits[20:]}"
