"""Reading a JSON request body into a model without FastAPI's dependency machinery, and the one
rule every JSON body follows: it is declared as JSON (415 ``UNSUPPORTED_MEDIA_TYPE`` otherwise).

Hot routes (the gateway's ``/execute``) read their body themselves: FastAPI's per-request
dependency solving costs more CPU than the rest of such a route. Errors come out exactly as
FastAPI's own would (a :class:`RequestValidationError` with ``body`` locations), so the problem
handlers answer them the same way: 400 ``MALFORMED_JSON`` or 422 ``VALIDATION_FAILED``. A body
holding a value no store or response can carry (a lone surrogate, NUL, a non-finite number, an
integer beyond 64 bits) is 422 ``UNSAFE_INPUT`` (:mod:`conclave.platform.inputs`); the error
carries the decoded document, so a route that audits refusals can record it escaped.
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.params import Form
from pydantic import BaseModel, ValidationError

from conclave.platform.errors import UnsupportedMediaType
from conclave.platform.inputs import loads_checked

Model = TypeVar("Model", bound=BaseModel)


JSON_MEDIA_TYPES = "application/json (or another JSON type: application/*+json)"


def media_type_of(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` value, lower-cased, without its parameters."""
    return (content_type or "").partition(";")[0].strip().lower()


def is_json_media_type(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` names JSON: ``application/json`` or ``application/*+json``, as
    FastAPI decodes them."""
    kind, _, subtype = media_type_of(content_type).partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


def check_json_body(content_type: str | None, body: bytes) -> None:
    """Raise :class:`UnsupportedMediaType` (415) when a request body is not declared as JSON.

    Browsers send ``text/plain``, form and multipart bodies to any site without asking it first
    (no CORS preflight); a JSON route that read them anyway would let any web page call it. An
    empty body passes: the schema check answers that it is missing.
    """
    if body and not is_json_media_type(content_type):
        declared = f"'{content_type[:80]}'" if content_type else "no Content-Type"
        raise UnsupportedMediaType(
            f"The request body must be {JSON_MEDIA_TYPES}; it came with {declared}.",
            extra={"accepted": ["application/json", "application/*+json"]},
        )


async def require_json_body(request: Request) -> None:
    """App-wide dependency: a route that takes a JSON body refuses any other (415
    ``UNSUPPORTED_MEDIA_TYPE``). Routes taking forms, multipart or no body are left alone."""
    body_field = getattr(request.scope.get("route"), "body_field", None)
    if body_field is None or isinstance(body_field.field_info, Form):
        return
    check_json_body(request.headers.get("content-type"), await request.body())


async def read_model(request: Request, model: type[Model]) -> Model:
    """``model`` parsed and validated from the request's JSON body (415 when the body is not
    declared as JSON)."""
    body = await request.body()
    check_json_body(request.headers.get("content-type"), body)
    # `json.loads`, not pydantic's JSON parser, so what parses (nesting depth, NaN) is what
    # FastAPI's own routes accept: deep nesting is the arguments' check to refuse, with an audit.
    try:
        document = loads_checked(body)
    except (ValueError, RecursionError) as exc:
        error = {"loc": ("body",), "msg": f"JSON decode error: {exc}", "type": "json_invalid"}
        raise RequestValidationError([error], body=body) from None
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        raise RequestValidationError(_body_errors(exc), body=document) from None


def _body_errors(exc: ValidationError) -> list[dict[str, Any]]:
    errors = []
    for error in exc.errors(include_url=False, include_context=False, include_input=False):
        errors.append({**error, "loc": ("body", *error["loc"])})
    return errors


def request_model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of a route that reads ``model`` with :func:`read_model`."""
    return {
        "required": True,
        "content": {"application/json": {"schema": model.model_json_schema()}},
    }
