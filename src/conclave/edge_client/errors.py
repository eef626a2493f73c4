"""Errors of the edge client. Each says whether trying again later can help."""

from __future__ import annotations


class EdgeClientError(Exception):
    """Base class of every error the edge client raises."""


class InvalidEnvelope(EdgeClientError, ValueError):
    """An envelope refused at enqueue (unknown type, unusable file, bad metadata); nothing is
    stored."""


class OutboxCorrupt(EdgeClientError):
    """The outbox file exists but is not a readable outbox database; it is left untouched."""


class UploadFailed(EdgeClientError):
    """An upload that did not produce Evidence Packs.

    ``transient`` failures (connection errors, time-outs, 408, 429, 5xx) may succeed unchanged
    later; the others (other 4xx, a missing local file) need a person to act first.
    ``retry_after`` is the server's ``Retry-After`` in seconds, when it sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        transient: bool,
        status: int | None = None,
        code: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.transient = transient
        self.status = status
        self.code = code
        self.retry_after = retry_after

    @property
    def server_unavailable(self) -> bool:
        """True when the server as a whole cannot take uploads now (not this item's fault), so a
        sync run should stop instead of trying every other item too."""
        return self.transient and (self.status is None or self.status in (429, 502, 503, 504))


class ReceiptUnavailable(EdgeClientError):
    """A receipt the server did not hand over for a reason waiting will not cure (not one of its
    receipt paths, an error answer, the server unreachable); the outbox keeps asking later."""


class ServerUnreachable(ReceiptUnavailable):
    """The server did not answer at all (connection refused, a time-out): asking for the next
    receipt now would fail the same way."""
