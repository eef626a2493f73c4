"""Reading a JSON request body into a model without FastAPI's dependency machinery.

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
from pydantic import BaseModel, ValidationError

from conclave.platform.inputs import loads_checked

Model = TypeVar("Model", bound=BaseModel)


async def read_model(request: Request, model: type[Model]) -> Model:
    """``model`` parsed and validated from the request's JSON body."""
    body = await request.body()
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
