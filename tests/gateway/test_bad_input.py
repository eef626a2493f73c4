"""Bad input gets a clear 4xx problem with a stable code, never a 500, never a half-written row."""

from __future__ import annotations

import json

import pytest

from tests.conftest import Backend
from tests.gateway.conftest import GatewayClient, audit_rows


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        pytest.param(b'{"tool": "echo", "args": ', 400, "MALFORMED_JSON", id="truncated"),
        pytest.param(b"\xff\xfe not json", 400, "MALFORMED_JSON", id="not-utf8"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, 413, "PAYLOAD_TOO_LARGE", id="too-large"),
        pytest.param(b"[" * 50_000, 400, "MALFORMED_JSON", id="too-deep-to-parse"),
        pytest.param(b'{"args": {}}', 422, "VALIDATION_FAILED", id="no-tool"),
        pytest.param(b'{"tool": 5, "args": {}}', 422, "VALIDATION_FAILED", id="tool-not-string"),
        pytest.param(
            b'{"tool": "' + b"x" * 300 + b'"}', 422, "VALIDATION_FAILED", id="tool-name-too-long"
        ),
        pytest.param(b'"just a string"', 422, "VALIDATION_FAILED", id="not-an-object"),
    ],
)
async def test_malformed_requests_are_refused_before_any_audit(
    backend: Backend, gateway: GatewayClient, body: bytes, status: int, code: str
):
    async with gateway(max_body_bytes=150_000) as client:
        response = await client.post(
            "/execute", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == code
        assert await audit_rows(backend) == []


async def test_deeply_nested_arguments_are_rejected_and_audited(
    backend: Backend, gateway: GatewayClient
):
    async with gateway() as client:
        deep: object = "leaf"
        for _ in range(200):
            deep = {"d": deep}
        response = await client.post(
            "/execute", json={"tool": "json_query", "args": {"document": deep, "query": "d"}}
        )
        assert response.status_code == 422
        assert response.json()["errors"][0]["rule"] == "maxDepth"
        [row] = await audit_rows(backend)
        assert row.status == "rejected"
        assert "_omitted" in row.args  # the audit keeps a note, not the hostile structure


async def test_huge_string_is_refused(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        response = await client.post(
            "/execute", json={"tool": "echo", "args": {"message": "a" * 200_000}}
        )
        assert response.status_code == 422
        assert response.json()["errors"][0]["rule"] == "maxLength"
        bigger = await client.post(
            "/execute", json={"tool": "echo", "args": {"message": "a" * 500_000}}
        )
        assert bigger.status_code == 413
        assert bigger.json()["code"] == "ARGS_TOO_LARGE"
        too_big = await client.post(
            "/execute", content=json.dumps({"tool": "echo", "args": {"message": "a" * 2_000_000}})
        )
        assert too_big.status_code == 413
        assert too_big.json()["code"] == "PAYLOAD_TOO_LARGE"
        rows = await audit_rows(backend)
        assert [row.error_code for row in rows] == ["VALIDATION_FAILED", "ARGS_TOO_LARGE"]
        assert "_omitted" in rows[1].args  # the audit keeps a note, not 500 kB


async def test_oversized_chunked_body_is_refused(backend: Backend, gateway: GatewayClient):
    async def chunks():
        for _ in range(40):
            yield b" " * 65_536

    async with gateway() as client:
        response = await client.post(
            "/execute", content=chunks(), headers={"content-type": "application/json"}
        )
        assert response.status_code == 413
        assert response.json()["code"] == "PAYLOAD_TOO_LARGE"
