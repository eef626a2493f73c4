"""The OpenAPI documents of the four services describe the errors they answer.

Walked from ``app.openapi()`` of every configuration (the gateway in finance mode included), never
from a list of routes here: an operation added tomorrow without its problem responses fails.
What the services really answer is checked against these documents by ``test_fuzz``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from conclave.platform.openapi import PROBLEM_SCHEMA
from tests.hostile.conftest import CONFIGURATIONS, build_app, service_settings

PROBLEM_JSON = "application/problem+json"
PROBLEM_REF = "#/components/schemas/Problem"
# Problems any request can get: the platform's Host/Origin guard (421, 403), the server's read
# limits (408, 431), an unsafe value in the path, query or a header (422).
EVERY_OPERATION = {"403", "408", "421", "422", "431"}


def _document(name: str) -> dict[str, Any]:
    service, overrides = CONFIGURATIONS[name]
    return build_app(service, service_settings(service, Path("unused"), **overrides)).openapi()


DOCUMENTS = {name: _document(name) for name in CONFIGURATIONS}


def _operations() -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    for name, document in DOCUMENTS.items():
        for path, operations in document["paths"].items():
            for method, operation in operations.items():
                yield name, path, method, operation


OPERATIONS = list(_operations())
IDS = [f"{name} {method.upper()} {path}" for name, path, method, _ in OPERATIONS]


def _expected_statuses(path: str, operation: dict[str, Any]) -> set[str]:
    expected = set(EVERY_OPERATION)
    if operation.get("security"):
        expected |= {"401", "403"}
    if "requestBody" in operation:
        expected |= {"400", "413", "415", "422"}
    if "{" in path:
        expected |= {"404"}
    return expected


@pytest.mark.parametrize(("name", "path", "method", "operation"), OPERATIONS, ids=IDS)
def test_every_operation_documents_its_problems(
    name: str, path: str, method: str, operation: dict[str, Any]
) -> None:
    responses = operation["responses"]
    missing = _expected_statuses(path, operation) - set(responses)
    assert not missing, f"undocumented problem statuses {sorted(missing)}"
    for status, response in responses.items():
        if int(status) < 400 or (path == "/health" and status == "503"):
            continue  # /health answers 503 with its health document
        assert set(response["content"]) == {PROBLEM_JSON}, (status, response)
        assert response["content"][PROBLEM_JSON]["schema"] == {"$ref": PROBLEM_REF}
        assert response["description"]
    if "401" in responses:
        assert responses["401"]["headers"]["WWW-Authenticate"]["required"] is True
    for status, response in responses.items():
        if status not in ("408", "431"):  # refused by the server before the application runs
            assert response["headers"]["X-Request-ID"]["required"] is True, status


@pytest.mark.parametrize("name", DOCUMENTS)
def test_no_fastapi_validation_error_shape(name: str) -> None:
    """The services never answer FastAPI's ``{detail: [...]}``: the documents do not claim it."""
    text = repr(DOCUMENTS[name])
    assert "HTTPValidationError" not in text
    assert "ValidationError" not in DOCUMENTS[name]["components"]["schemas"]


@pytest.mark.parametrize("name", DOCUMENTS)
def test_security_schemes_are_defined_and_bearer(name: str) -> None:
    document = DOCUMENTS[name]
    schemes = document["components"]["securitySchemes"]
    assert schemes["HTTPBearer"]["type"] == "http"
    assert schemes["HTTPBearer"]["scheme"] == "bearer"
    used = {
        scheme
        for _, _, _, operation in OPERATIONS
        for requirement in operation.get("security", [])
        for scheme in requirement
    }
    assert used <= set(schemes), used - set(schemes)


def test_hot_routes_document_what_they_can_answer() -> None:
    """Routes outside FastAPI's dependency machinery declare their own problems."""
    execute = DOCUMENTS["gateway"]["paths"]["/execute"]["post"]
    assert {"409", "429", "502", "503", "504"} <= set(execute["responses"])
    assert execute["responses"]["429"]["headers"]["Retry-After"]["required"] is True
    dispatch = DOCUMENTS["graph"]["paths"]["/dispatch"]["post"]
    assert dispatch["security"] == [{"HTTPBearer": []}]
    assert {"401", "403", "503"} <= set(dispatch["responses"])


def test_problem_schema_is_valid_json_schema() -> None:
    Draft202012Validator.check_schema(PROBLEM_SCHEMA)
    for document in DOCUMENTS.values():
        assert document["components"]["schemas"]["Problem"] == PROBLEM_SCHEMA
