"""RFC 9457 problem+json rendering, in one place for every service."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from conclave.platform.errors import ConclaveError
from conclave.platform.jsontext import CompactJSONResponse
from conclave.platform.logs import request_id_var
from conclave.platform.problem_types import ProblemCode, title_of, type_uri
from conclave.platform.serving import read_timeout_of

log = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"

_HTTP_CODES = {
    400: ProblemCode.BAD_REQUEST,
    401: ProblemCode.UNAUTHORIZED,
    403: ProblemCode.FORBIDDEN,
    404: ProblemCode.NOT_FOUND,
    405: ProblemCode.METHOD_NOT_ALLOWED,
    406: ProblemCode.NOT_ACCEPTABLE,
    413: ProblemCode.PAYLOAD_TOO_LARGE,
    415: ProblemCode.UNSUPPORTED_MEDIA_TYPE,
}


def problem(
    status: int,
    code: str,
    detail: str,
    *,
    instance: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """Build a problem+json response; its ``type`` and ``title`` follow from ``code`` alone."""
    body: dict[str, Any] = {
        "type": type_uri(code),
        "title": title_of(code),
        "status": status,
        "detail": detail,
        "code": code,
        "instance": instance,
        "request_id": request_id_var.get(),
    }
    if errors:
        body["errors"] = errors
    if extra:
        body.update({k: v for k, v in extra.items() if k not in body})
    return CompactJSONResponse(
        body, status_code=status, media_type=PROBLEM_MEDIA_TYPE, headers=headers
    )


def error_response(error: ConclaveError, instance: str | None = None) -> JSONResponse:
    """Render a :class:`ConclaveError`."""
    return problem(
        error.status,
        error.code,
        error.detail,
        instance=instance,
        errors=error.errors,
        extra=error.extra,
        headers=error.headers,
    )


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in loc)


async def _on_conclave_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ConclaveError)
    return error_response(exc, request.url.path)


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    raw = exc.errors()
    if any(error.get("type") == "json_invalid" for error in raw):
        return problem(
            400,
            ProblemCode.MALFORMED_JSON,
            "The request body is not valid JSON.",
            instance=request.url.path,
        )
    errors = [
        {
            "field": _field(error.get("loc", ())),
            "message": error.get("msg", ""),
            "type": error.get("type", ""),
        }
        for error in raw
    ]
    return problem(
        422,
        ProblemCode.VALIDATION_FAILED,
        "The request does not match its schema.",
        instance=request.url.path,
        errors=errors,
    )


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and "parsing the body" in str(exc.detail):
        # FastAPI's own JSON parsing failed in a way it does not classify (e.g. nesting so deep
        # that the decoder recursed out): still malformed input, not a server fault.
        return problem(
            400,
            ProblemCode.MALFORMED_JSON,
            "The request body could not be parsed.",
            instance=request.url.path,
        )
    code = _HTTP_CODES.get(exc.status_code, f"HTTP_{exc.status_code}")
    detail = exc.detail if isinstance(exc.detail, str) else title_of(code)
    return problem(
        exc.status_code, code, detail, instance=request.url.path, headers=dict(exc.headers or {})
    )


def internal_error(path: str, exc: BaseException) -> JSONResponse:
    """Log ``exc`` and render the generic 500 problem (the exception's text stays in the log)."""
    log.error("unhandled error", exc_info=exc, extra={"path": path})
    return problem(500, ProblemCode.INTERNAL_ERROR, "An unexpected error occurred.", instance=path)


async def _on_client_gone(request: Request, exc: Exception) -> JSONResponse:
    # The client went away mid-body, or the server closed on it at a read deadline: no one will
    # read this answer, but the HTTP metrics record it, and it is no server fault (no 500, no
    # error log for every slow or vanished client).
    timeout = read_timeout_of(request.scope)
    if timeout is not None:
        detail = "The request did not arrive in time; the connection was closed."
        return problem(408, timeout, detail, instance=request.url.path)
    detail = "The client went away before its request arrived."
    return problem(400, ProblemCode.CLIENT_DISCONNECTED, detail, instance=request.url.path)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    return internal_error(request.url.path, exc)


def install_problem_handlers(app: FastAPI) -> None:
    """Make every error of ``app`` a problem+json response."""
    app.add_exception_handler(ConclaveError, _on_conclave_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(ClientDisconnect, _on_client_gone)
    app.add_exception_handler(Exception, _on_unexpected)
