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
    """401 with an RFC 6750 challenge. A token that was presented and refused (code
    ``INVALID_TOKEN`` or ``TOKEN_EXPIRED``) gets ``error="invalid_token"``, which tells a client
    (MCP Inspector, the TypeScript SDK) that its bearer token is wrong rather than that it should
    start an interactive OAuth flow; a request without a bearer token gets no error code (RFC
    6750 §3.1)."""

    status, code, title = 401, "UNAUTHORIZED", "Unauthorized"

    def __init__(self, detail: str | None = None, **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)
        if "WWW-Authenticate" not in self.headers:
            self.headers["WWW-Authenticate"] = bearer_challenge(self.code, self.detail)


_REFUSED_TOKEN_CODES = frozenset({"INVALID_TOKEN", "TOKEN_EXPIRED"})


def bearer_challenge(code: str, detail: str) -> str:
    """The ``WWW-Authenticate`` value of a 401 with ``code``."""
    if code not in _REFUSED_TOKEN_CODES:
        return 'Bearer realm="conclave"'
    # error_description allows printable ASCII except '"' and '\\' (RFC 6750 §3).
    description = "".join(c if " " <= c <= "~" and c not in '"\\' else "'" for c in detail)
    return f'Bearer realm="conclave", error="invalid_token", error_description="{description}"'


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
