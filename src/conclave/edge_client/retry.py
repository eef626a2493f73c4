"""When a transiently failed item is tried again: capped exponential backoff with jitter."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RetryPolicy:
    """Delay before attempt ``n + 1`` after ``n`` transient failures.

    ``base_seconds * 2 ** (n - 1)``, capped at ``max_seconds``, then scaled by a random factor in
    ``[1 - jitter, 1]`` so devices that lost the network together do not come back in lockstep.
    A server's ``Retry-After`` is honoured when it asks for longer (still capped).
    """

    base_seconds: float = 5.0
    max_seconds: float = 900.0
    jitter: float = 0.5
    random: Callable[[], float] = field(default=random.random, compare=False)

    def delay(self, attempts: int, retry_after: float | None = None) -> float:
        """Seconds to wait after the ``attempts``-th failure (1 for the first)."""
        exponent = min(max(attempts - 1, 0), 32)  # 2**32 * base is far past any sane cap
        capped = min(self.max_seconds, self.base_seconds * 2.0**exponent)
        delay = capped * (1 - self.jitter * self.random())
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_seconds))
        return delay
