"""The error vocabulary of every Conclave service.

Domain code raises these; the HTTP layer renders them once, as RFC 9457 problem+json. A
problem's title follows from its code alone (:mod:`conclave.platform.problem_types`).
Domain code never imports FastAPI.
"""

from __future__ import annotations

from typing import Any

from conclave.platform.problem_types import ProblemCode, title_of


class ConclaveError(Exception):
    """Base error: an HTTP status, a stable machine ``code`` and a human ``detail``."""

    status: int = 500
    code: str = ProblemCode.INTERNAL_ERROR

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
    status, code = 400, ProblemCode.BAD_REQUEST


class Unauthorized(ConclaveError):
    """401 with an RFC 6750 challenge. A token that was presented and refused (code
    ``INVALID_TOKEN`` or ``TOKEN_EXPIRED``) gets ``error="invalid_token"``, which tells a client
    (MCP Inspector, the TypeScript SDK) that its bearer token is wrong rather than that it should
    start an interactive OAuth flow; a request without a bearer token gets no error code (RFC
    6750 §3.1)."""

    status, code = 401, ProblemCode.UNAUTHORIZED

    def __init__(self, detail: str | None = None, **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)
        if "WWW-Authenticate" not in self.headers:
            self.headers["WWW-Authenticate"] = bearer_challenge(self.code, self.detail)


_REFUSED_TOKEN_CODES = frozenset({ProblemCode.INVALID_TOKEN, ProblemCode.TOKEN_EXPIRED})


def bearer_challenge(code: str, detail: str, *, parameters: str = "") -> str:
    """The ``WWW-Authenticate`` value of a 401 with ``code``; ``parameters`` (already quoted
    ``name="value"`` pairs, such as RFC 9728's ``resource_metadata``) follow the realm."""
    challenge = 'Bearer realm="conclave"' + (f", {parameters}" if parameters else "")
    if code not in _REFUSED_TOKEN_CODES:
        return challenge
    # error_description allows printable ASCII except '"' and '\\' (RFC 6750 §3).
    description = "".join(c if " " <= c <= "~" and c not in '"\\' else "'" for c in detail)
    return f'{challenge}, error="invalid_token", error_description="{description}"'


class Forbidden(ConclaveError):
    status, code = 403, ProblemCode.FORBIDDEN


class NotFound(ConclaveError):
    status, code = 404, ProblemCode.NOT_FOUND


class Conflict(ConclaveError):
    status, code = 409, "CONFLICT"


class PayloadTooLarge(ConclaveError):
    status, code = 413, ProblemCode.PAYLOAD_TOO_LARGE


class UnsupportedMediaType(ConclaveError):
    status, code = 415, ProblemCode.UNSUPPORTED_MEDIA_TYPE


class Unprocessable(ConclaveError):
    status, code = 422, ProblemCode.VALIDATION_FAILED


class RateLimited(ConclaveError):
    status, code = 429, ProblemCode.RATE_LIMITED


class BadGateway(ConclaveError):
    status, code = 502, ProblemCode.BACKEND_FAILED


class Unavailable(ConclaveError):
    status, code = 503, ProblemCode.UNAVAILABLE


class StoreUnavailable(Unavailable):
    code = ProblemCode.STORE_UNAVAILABLE


class BusUnavailable(Unavailable):
    code = ProblemCode.BUS_UNAVAILABLE


class GatewayTimeout(ConclaveError):
    status, code = 504, ProblemCode.TIMEOUT
