"""The error vocabulary of every Conclave service.

Domain code raises these; the HTTP layer renders them once, as RFC 9457 problem+json.
Domain code never imports FastAPI.
"""

from __future__ import annotations

from typing import Any


class ConclaveError(Exception):
    """Base error: an HTTP status, a stable machine ``code`` and a human ``detail``."""

    status: int = 500
    code: str = "INTERNAL_ERROR"
    title: str = "Internal error"

    def __init__(
        self,
        detail: str | None = None,
        *,
        code: str | None = None,
        errors: list[dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        if code is not None:
            self.code = code
        self.errors = errors
        self.extra = extra or {}
        self.headers = headers or {}


class BadRequest(ConclaveError):
    status, code, title = 400, "BAD_REQUEST", "Bad request"


class Unauthorized(ConclaveError):
    status, code, title = 401, "UNAUTHORIZED", "Unauthorized"

    def __init__(self, detail: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("headers", {"WWW-Authenticate": 'Bearer realm="conclave"'})
        super().__init__(detail, **kwargs)


class Forbidden(ConclaveError):
    status, code, title = 403, "FORBIDDEN", "Forbidden"


class NotFound(ConclaveError):
    status, code, title = 404, "NOT_FOUND", "Not found"


class Conflict(ConclaveError):
    status, code, title = 409, "CONFLICT", "Conflict"


class PayloadTooLarge(ConclaveError):
    status, code, title = 413, "PAYLOAD_TOO_LARGE", "Payload too large"


class UnsupportedMediaType(ConclaveError):
    status, code, title = 415, "UNSUPPORTED_MEDIA_TYPE", "Unsupported media type"


class Unprocessable(ConclaveError):
    status, code, title = 422, "VALIDATION_FAILED", "Validation failed"


class RateLimited(ConclaveError):
    status, code, title = 429, "RATE_LIMITED", "Too many requests"


class BadGateway(ConclaveError):
    status, code, title = 502, "BACKEND_FAILED", "Backend failed"


class Unavailable(ConclaveError):
    status, code, title = 503, "UNAVAILABLE", "Service unavailable"


class StoreUnavailable(Unavailable):
    code, title = "STORE_UNAVAILABLE", "Store unavailable"


class BusUnavailable(Unavailable):
    code, title = "BUS_UNAVAILABLE", "Bus unavailable"


class GatewayTimeout(ConclaveError):
    status, code, title = 504, "TIMEOUT", "Timed out"
