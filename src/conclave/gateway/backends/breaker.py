"""A circuit breaker per backend: stop calling a backend that keeps failing, try again later."""

from __future__ import annotations

import time


class CircuitBreaker:
    """Closed → open after ``threshold`` consecutive failures → half-open after ``reset_seconds``
    (one trial call) → closed on success, open again on failure."""

    def __init__(self, *, threshold: int = 5, reset_seconds: float = 30.0) -> None:
        self._threshold = threshold
        self._reset = reset_seconds
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_running = False

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half-open``."""
        if self._opened_at is None:
            return "closed"
        return "half-open" if time.monotonic() - self._opened_at >= self._reset else "open"

    def allow(self) -> bool:
        """Whether a call may go to the backend now."""
        state = self.state
        if state == "closed":
            return True
        if state == "half-open" and not self._trial_running:
            self._trial_running = True
            return True
        return False

    def record_success(self) -> None:
        """The backend answered: close the circuit."""
        self._failures = 0
        self._opened_at = None
        self._trial_running = False

    def record_neutral(self) -> None:
        """The call ended saying nothing of the backend (its own time-out, its caller gone):
        a trial call's turn is over, the next call may be the trial."""
        self._trial_running = False

    def record_failure(self) -> None:
        """The backend failed (connection, time-out, 5xx): maybe open the circuit."""
        self._failures += 1
        self._trial_running = False
        if self._opened_at is not None or self._failures >= self._threshold:
            self._opened_at = time.monotonic()
