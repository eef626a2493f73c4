"""What every service's OpenAPI document says about errors and credentials, derived in one place.

Every error a service answers is an RFC 9457 problem (:mod:`conclave.platform.problems`), so the
documents describe them with one shared ``Problem`` schema under ``application/problem+json``
instead of FastAPI's default 422 ``HTTPValidationError``, which no service ever answers.

Each route's problem statuses come from two sources:

* derived from what the route is (:func:`derived_statuses`): the platform's guard may refuse any
  request (421 ``HOST_NOT_ALLOWED``, 403 ``ORIGIN_NOT_ALLOWED``), the unsafe-value check reads the
  path, query and headers of every request (422 ``UNSAFE_INPUT``), and the server's read limits
  apply to every request (408 ``HEADER_TIMEOUT``, 431); an authenticated route adds 401 and 403;
  a route with a body adds 400, 408 ``BODY_TIMEOUT``, 413, 415 and 422; a route with path
  parameters adds 404;
* declared by the route itself with :func:`problem_responses`: what only its own code can answer
  (409, 429, 502, 503, 504, a 400 for a bad cursor).

:func:`install_problem_documentation` applies both when the document is first built, so a route
added by any service gets them without a line of its own, and a response a route declares with a
description only (``{409: {"description": ...}}``) is given the ``Problem`` body too. The
derivation reads the document FastAPI built (an operation's ``security``, ``requestBody`` and
path), not FastAPI's route objects: the fast-lane routes, which describe what they read in
``openapi_extra``, are treated like every other, and nothing depends on FastAPI's internals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from conclave.platform.problem_types import TYPE_BASE
from conclave.platform.problems import PROBLEM_MEDIA_TYPE

PROBLEM_SCHEMA_NAME = "Problem"
BEARER_SCHEME = "HTTPBearer"
"""The security scheme's name: the one FastAPI gives the ``HTTPBearer`` dependency, so routes
that authenticate through it and routes that read the header themselves name the same scheme."""
BEARER_SECURITY: list[dict[str, list[str]]] = [{BEARER_SCHEME: []}]
"""``security`` of a route that authenticates without the dependency (the fast lanes)."""

_REF = {"$ref": f"#/components/schemas/{PROBLEM_SCHEMA_NAME}"}

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": PROBLEM_SCHEMA_NAME,
    "type": "object",
    "description": (
        "RFC 9457 problem details. `type` and `title` follow from `code` alone; `detail` "
        "explains this occurrence. Routes add extension members (the gateway's `conclave_id`, "
        "`tool` and `orthodoxy_status`, the collector's `known_types`, a limit's "
        "`limit_bytes` or `retry_after_seconds`): clients must ignore members they do not know."
    ),
    "required": ["type", "title", "status", "detail", "code"],
    "properties": {
        "type": {
            "type": "string",
            "format": "uri",
            "description": f"`{TYPE_BASE}` followed by the code in kebab case.",
        },
        "title": {"type": "string", "description": "The problem type's summary."},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string", "description": "What went wrong in this request."},
        "code": {"type": "string", "description": "Stable machine code (docs/problems.md)."},
        "instance": {"type": ["string", "null"], "description": "The request path."},
        "request_id": {
            "type": ["string", "null"],
            "description": "The request's id, as in the `X-Request-ID` header.",
        },
        "errors": {
            "type": "array",
            "description": "One entry per invalid field (validation problems).",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {
                    "field": {
                        "type": "string",
                        "description": "Where: a dotted location (body.user_id) or, for tool "
                        "arguments, a JSON pointer (/expression).",
                    },
                    "message": {"type": "string"},
                    "type": {"type": "string", "description": "Machine kind of the error."},
                    "rule": {
                        "type": "string",
                        "description": "Tool arguments: the JSON Schema keyword that failed.",
                    },
                },
            },
        },
    },
    "additionalProperties": True,
}

BEARER_SECURITY_SCHEME: dict[str, Any] = {
    "type": "http",
    "scheme": "bearer",
    "bearerFormat": "opaque token or JWT",
    "description": (
        "`Authorization: Bearer <token>`: a static API token (CONCLAVE_API_TOKENS) or a JWT "
        "signed HS256 or RS256 whose `sub` is the user id. With CONCLAVE_AUTH=disabled no "
        "credentials are needed and no 401 is answered."
    ),
}

_DESCRIPTIONS = {
    400: "Malformed request (MALFORMED_JSON, BAD_REQUEST, CLIENT_DISCONNECTED)",
    401: "Missing or invalid credentials (UNAUTHORIZED, INVALID_TOKEN, TOKEN_EXPIRED)",
    403: "Refused caller (ORIGIN_NOT_ALLOWED; on authenticated routes also USER_MISMATCH, "
    "ACTING_USER_FORBIDDEN)",
    404: "No such resource",
    408: "The request did not arrive in time (HEADER_TIMEOUT, BODY_TIMEOUT)",
    409: "Conflict with the resource's state",
    413: "Body too large (PAYLOAD_TOO_LARGE)",
    415: "Body of a media type the route does not read (UNSUPPORTED_MEDIA_TYPE)",
    421: "Host not allowed (HOST_NOT_ALLOWED)",
    422: "Unsafe value (UNSAFE_INPUT) or input that breaks the schema (VALIDATION_FAILED)",
    429: "Rate limit used up (RATE_LIMITED): retry after Retry-After seconds",
    431: "Request headers too large (HEADERS_TOO_LARGE)",
    502: "An upstream failed (BACKEND_FAILED)",
    503: "A dependency is down; nothing was done (STORE_UNAVAILABLE, BUS_UNAVAILABLE)",
    504: "An upstream did not answer in time (TIMEOUT)",
}
_HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": "The bearer challenge.",
            "required": True,
            "schema": {"type": "string"},
        }
    },
    429: {
        "Retry-After": {
            "description": "Seconds to wait before retrying.",
            "required": True,
            "schema": {"type": "string", "pattern": "^[0-9]+$"},
        }
    },
}
HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: {
        "description": "Unhealthy: the health document says which dependency is down",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}
"""``responses=`` of a ``/health`` route: its 503 is the health document, not a problem."""
_EVERY_ROUTE = (403, 408, 421, 422, 431)
_AUTHENTICATED = (401, 403)
_WITH_BODY = (400, 408, 413, 415, 422)
_WITH_PATH_PARAMETERS = (404,)


def problem_response(status: int, description: str | None = None) -> dict[str, Any]:
    """The OpenAPI response object of a problem answered with ``status``."""
    response: dict[str, Any] = {
        "description": description or _DESCRIPTIONS.get(status, "Problem"),
        "content": {PROBLEM_MEDIA_TYPE: {"schema": dict(_REF)}},
    }
    if status in _HEADERS:
        response["headers"] = _HEADERS[status]
    return response


def problem_responses(*statuses: int, **descriptions: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a route: the problems only its own code answers, by status. A
    description per status may be given as ``s409="..."``."""
    return {status: problem_response(status, descriptions.get(f"s{status}")) for status in statuses}


def derived_statuses(path: str, operation: dict[str, Any]) -> set[int]:
    """The problem statuses an operation can answer because of what it is (see the module doc),
    read from the operation as documented: its ``security``, its ``requestBody``, its path."""
    statuses = set(_EVERY_ROUTE)
    if operation.get("security"):
        statuses.update(_AUTHENTICATED)
    if "requestBody" in operation:
        statuses.update(_WITH_BODY)
    if "{" in path:
        statuses.update(_WITH_PATH_PARAMETERS)
    return statuses


def document_operation_problems(path: str, operation: dict[str, Any]) -> None:
    """Give ``operation`` its derived problem responses, and the ``Problem`` body to every error
    response it declares without one. FastAPI's own 422 (``HTTPValidationError``, a shape no
    service answers) is replaced; a description the route wrote is kept."""
    responses: dict[str, Any] = operation.setdefault("responses", {})
    for status in derived_statuses(path, operation):
        responses.setdefault(str(status), problem_response(status))
    for key, response in responses.items():
        if not key.isdigit() or int(key) < 400:
            continue
        content = response.get("content") or {}
        if content and not _is_fastapi_validation_error(content):
            continue  # a body of its own (a 503 health document)
        documented = problem_response(int(key))
        if response.get("description") not in (None, "", _FASTAPI_422_DESCRIPTION):
            documented["description"] = response["description"]
        responses[key] = {**response, **documented}


# Every answer of the application echoes these (``RequestContextMiddleware``); the server's own
# refusals of a request it could not read (408, 431) are written before any application runs.
_REQUEST_ID_HEADERS = {
    "X-Request-ID": {
        "description": "The request's id (the client's `X-Request-ID` if usable, else new).",
        "required": True,
        "schema": {"type": "string"},
    },
    "X-Correlation-ID": {
        "description": "The correlation id (the client's `X-Correlation-ID`, else the request id).",
        "required": True,
        "schema": {"type": "string"},
    },
}
_WITHOUT_REQUEST_IDS = frozenset({"408", "431"})


def _document_request_ids(responses: dict[str, Any]) -> None:
    for key, response in responses.items():
        if key not in _WITHOUT_REQUEST_IDS:
            response["headers"] = {**_REQUEST_ID_HEADERS, **response.get("headers", {})}


_FASTAPI_422_DESCRIPTION = "Validation Error"
_FASTAPI_422_SCHEMAS = ("HTTPValidationError", "ValidationError")


def _is_fastapi_validation_error(content: dict[str, Any]) -> bool:
    schema = (content.get("application/json") or {}).get("schema") or {}
    return str(schema.get("$ref", "")).endswith("/HTTPValidationError")


def document_problems(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (an OpenAPI document FastAPI built) with every operation's problems, the
    request-id headers, the ``Problem`` schema and the bearer scheme; FastAPI's validation-error
    schemas are dropped."""
    for path, operations in document.get("paths", {}).items():
        for operation in operations.values():
            if isinstance(operation, dict) and "responses" in operation:
                document_operation_problems(path, operation)
                _document_request_ids(operation["responses"])
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in _FASTAPI_422_SCHEMAS:
        schemas.pop(name, None)
    schemas[PROBLEM_SCHEMA_NAME] = PROBLEM_SCHEMA
    components.setdefault("securitySchemes", {})[BEARER_SCHEME] = BEARER_SECURITY_SCHEME
    return document


def install_problem_documentation(app: FastAPI) -> None:
    """Make ``app.openapi()`` describe every route's problems and the bearer scheme (routes
    added to ``app`` after this call are covered too: the document is built on first use)."""
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_problems(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
