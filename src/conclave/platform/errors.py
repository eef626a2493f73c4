"""The error vocabulary of every Conclave service.

Domain code raises these; the HTTP layer renders them once, as RFC 9457 problem+json. A
problem's title follows from its code alone (:mod:`conclave.platform.problem_types`).
Domain code never imports FastAPI.
"""

from __future__ import annotations

from typing import Any

from conclave.platform.problem_types import title_of


class ConclaveError(Exception):
    """Base error: an HTTP status, a stable machine ``code`` and a human ``detail``."""

    status: int = 500
    code: str = "INTERNAL_ERROR"

    def __init__(
        self,
        detail: str | None = None,
        *,
        code: str | None = None,
        errors: list[dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        if code is not None:
            self.code = code
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.errors = errors
        self.extra = extra or {}
        self.headers = headers or {}

    @property
    def title(self) -> str:
        """The problem type's one title (:mod:`conclave.platform.problem_types`)."""
        return title_of(self.code)


class BadRequest(ConclaveError):
    status, code = 400, "BAD_REQUEST"


class Unauthorized(ConclaveError):
    status, code = 401, "UNAUTHORIZED"

    def __init__(self, detail: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("headers", {"WWW-Authenticate": 'Bearer realm="conclave"'})
        super().__init__(detail, **kwargs)


class Forbidden(ConclaveError):
    status, code = 403, "FORBIDDEN"


class NotFound(ConclaveError):
    status, code = 404, "NOT_FOUND"


class Conflict(ConclaveError):
    status, code = 409, "CONFLICT"


class PayloadTooLarge(ConclaveError):
    status, code = 413, "PAYLOAD_TOO_LARGE"


class UnsupportedMediaType(ConclaveError):
    status, code = 415, "UNSUPPORTED_MEDIA_TYPE"


class Unprocessable(ConclaveError):
    status, code = 422, "VALIDATION_FAILED"


class RateLimited(ConclaveError):
    status, code = 429, "RATE_LIMITED"


class BadGateway(ConclaveError):
    status, code = 502, "BACKEND_FAILED"


class Unavailable(ConclaveError):
    status, code = 503, "UNAVAILABLE"


class StoreUnavailable(Unavailable):
    code = "STORE_UNAVAILABLE"


class BusUnavailable(Unavailable):
    code = "BUS_UNAVAILABLE"


class GatewayTimeout(ConclaveError):
    status, code = 504, "TIMEOUT"
