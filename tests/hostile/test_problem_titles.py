"""One problem type, one title (RFC 9457 §3.1.3), whichever service or code path answers it.

Many different bad requests go to every service; every answer must be a problem whose ``type``
and ``title`` are the registered ones for its ``code``, and no ``type`` may be seen with two
titles. The fuzzing suite (``test_fuzz``) checks the same over its generated requests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conclave.platform.problem_types import PROBLEM_TYPES, title_of, type_uri
from tests.conftest import Backend
from tests.hostile.conftest import AUTH, assert_problem, expired_jwt, hostile_app

JSON = {**AUTH, "Content-Type": "application/json"}
# (method, path, keyword arguments for httpx, expected code), per service.
BAD_REQUESTS: dict[str, list[tuple[str, str, dict[str, Any], str]]] = {
    "gateway": [
        ("POST", "/execute", {"json": {}}, "VALIDATION_FAILED"),  # request shape
        (
            "POST",
            "/execute",
            {"json": {"tool": "evaluate_expression", "args": {}}},
            "VALIDATION_FAILED",
        ),  # tool arguments: the same type, so the same title
        ("POST", "/execute", {"json": {"tool": "echo", "args": {"nope": 1}}}, "VALIDATION_FAILED"),
        ("POST", "/execute", {"json": {"tool": "no_such_tool", "args": {}}}, "UNKNOWN_TOOL"),
        (
            "POST",
            "/execute",
            {"json": {"tool": "evaluate_expression", "args": {"expression": "1/0"}}},
            "INVALID_EXPRESSION",
        ),
        ("POST", "/execute", {"content": b"{not json"}, "MALFORMED_JSON"),
        (
            "POST",
            "/execute",
            {"json": {"tool": "echo", "args": {"text": "a\x00b"}}},
            "UNSAFE_INPUT",
        ),
        ("GET", "/tools?format=nope", {}, "VALIDATION_FAILED"),
        ("GET", "/calls/nope", {}, "CALL_NOT_FOUND"),
        ("GET", "/no/such/path", {}, "NOT_FOUND"),
        ("DELETE", "/tools", {}, "METHOD_NOT_ALLOWED"),
    ],
    "collector": [
        ("POST", "/expedition/run", {"json": {}}, "VALIDATION_FAILED"),
        (
            "POST",
            "/expedition/run",
            {"json": {"expedition_type": "nope", "target_collections": ["titles"]}},
            "UNKNOWN_EXPEDITION_TYPE",
        ),
        ("POST", "/expedition/run", {"content": b"[1,"}, "MALFORMED_JSON"),
        ("GET", "/expedition/status/nope", {}, "EXPEDITION_NOT_FOUND"),
        ("GET", "/expedition/history?cursor=nope", {}, "INVALID_CURSOR"),
        ("GET", "/expedition/history?limit=0", {}, "VALIDATION_FAILED"),
        ("DELETE", "/schedules/nope", {}, "SCHEDULE_NOT_FOUND"),
        ("GET", "/collections/bad%00name/search?q=x", {}, "UNSAFE_INPUT"),
    ],
    "graph": [
        ("POST", "/dispatch", {"json": {}}, "VALIDATION_FAILED"),
        ("POST", "/dispatch", {"json": {"query": 5}}, "VALIDATION_FAILED"),
        ("POST", "/dispatch", {"json": {"query": "x" * 100_000}}, "QUERY_TOO_LONG"),
        ("POST", "/dispatch", {"content": b"{"}, "MALFORMED_JSON"),
    ],
    "edge": [
        (
            "POST",
            "/api/edge-intake/nope",
            {"files": {"file": ("a.txt", b"x")}},
            "UNKNOWN_MEDIA_TYPE",
        ),
        ("POST", "/api/edge-intake/image", {"json": {"file": "x"}}, "UNSUPPORTED_MEDIA_TYPE"),
        ("POST", "/api/edge-intake/image", {"files": {"metadata": (None, "{}")}}, "MISSING_FILE"),
        ("POST", "/api/edge-intake/image", {"files": {"file": ("a.png", b"")}}, "EMPTY_FILE"),
        ("GET", "/api/edge-intake/evidence/nope", {}, "EVIDENCE_NOT_FOUND"),
        ("GET", "/api/edge-intake/events?cursor=nope", {}, "INVALID_CURSOR"),
        ("GET", "/api/edge-intake/events?limit=-1", {}, "VALIDATION_FAILED"),
    ],
}
# Credentials problems, the same on every service.
AUTH_PROBLEMS: list[tuple[dict[str, str], str]] = [
    ({}, "UNAUTHORIZED"),
    ({"Authorization": "Basic eDp5"}, "UNAUTHORIZED"),
    ({"Authorization": "Bearer wrong-token"}, "INVALID_TOKEN"),
]
AUTHENTICATED_GET = {
    "gateway": "/tools",
    "collector": "/stats",
    "graph": None,  # its one authenticated route is a POST: below
    "edge": "/api/edge-intake/pipeline",
}


@pytest.mark.parametrize("service", list(BAD_REQUESTS))
async def test_each_problem_type_has_one_title(
    service: str, embedded: Backend, tmp_path: Path
) -> None:
    seen: dict[str, set[str]] = {}
    async with hostile_app(service, embedded, tmp_path) as (client, _app):
        answers = []
        for method, path, kwargs, code in BAD_REQUESTS[service]:
            headers = JSON if "content" in kwargs else AUTH
            response = await client.request(method, path, headers=headers, **kwargs)
            answers.append((response, code))
        target = AUTHENTICATED_GET[service]
        for headers, code in [*AUTH_PROBLEMS, ({"Authorization": f"Bearer {expired_jwt()}"},
                                               "TOKEN_EXPIRED")]:  # fmt: skip
            if target is None:
                response = await client.post("/dispatch", json={"query": "q"}, headers=headers)
            else:
                response = await client.get(target, headers=headers)
            answers.append((response, code))
    for response, code in answers:
        body = assert_problem(response, PROBLEM_TYPES[code].statuses)
        assert body["code"] == code, (code, body)
        assert body["type"] == type_uri(code)
        assert body["title"] == title_of(code) == PROBLEM_TYPES[code].title
        seen.setdefault(body["type"], set()).add(body["title"])
        if response.status_code == 401:  # as documented: the challenge comes with it
            assert response.headers["www-authenticate"].startswith("Bearer ")
    assert {kind: titles for kind, titles in seen.items() if len(titles) > 1} == {}


async def test_bad_shape_and_bad_arguments_share_one_title(
    embedded: Backend, tmp_path: Path
) -> None:
    """The reported case: a body of the wrong shape and tool arguments of the wrong shape are the
    same problem type, ``validation-failed``, and so carry the same title."""
    async with hostile_app("gateway", embedded, tmp_path) as (client, _app):
        shape = await client.post("/execute", json={"args": {}}, headers=AUTH)
        arguments = await client.post(
            "/execute", json={"tool": "evaluate_expression", "args": {}}, headers=AUTH
        )
    shape_body = assert_problem(shape, 422)
    arguments_body = assert_problem(arguments, 422)
    assert shape_body["type"] == arguments_body["type"] == type_uri("VALIDATION_FAILED")
    assert shape_body["title"] == arguments_body["title"] == "Validation failed"
    # What differs between the two occurrences is in `detail` and `errors`, as RFC 9457 wants.
    assert shape_body["detail"] != arguments_body["detail"]
    assert json.dumps(arguments_body["errors"])
