"""The governance chain end to end: every call leaves one audit row and one event."""

from __future__ import annotations

import re

import pytest

from conclave.gateway.builtin.echo import ECHO
from tests.conftest import Backend, eventually
from tests.gateway.conftest import Calls, GatewayClient, audit_rows, published

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


async def _one_event(backend: Backend, conclave_id: str) -> dict:
    async def find():
        return [e for e in await published(backend) if e.payload["conclave_id"] == conclave_id]

    events = await eventually(find)
    assert len(events) == 1, events
    return events[0]


async def test_successful_call_is_audited_and_published(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        response = await client.post(
            "/execute",
            json={"tool": "evaluate_expression", "args": {"expression": "2 ** 10 + sqrt(16)"}},
            headers={"X-Correlation-ID": "corr-42"},
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["tool"] == "evaluate_expression"
        assert body["status"] == "succeeded"
        assert body["orthodoxy_status"] == "blessed"
        assert body["result"] == {"expression": "2 ** 10 + sqrt(16)", "value": 1028.0}
        assert body["warnings"] == []
        assert body["duration_ms"] >= 0

        [row] = await audit_rows(backend)
        assert row.conclave_id == body["conclave_id"]
        assert row.tool_name == "evaluate_expression"
        assert row.args == {"expression": "2 ** 10 + sqrt(16)"}
        assert row.result == body["result"]
        assert (row.status, row.orthodoxy_status, row.user_id) == (
            "succeeded",
            "blessed",
            "anonymous",
        )
        assert row.correlation_id == "corr-42"
        assert row.created_at is not None and row.completed_at is not None

        event = await _one_event(backend, body["conclave_id"])
        assert event.channel == "conclave.mcp.actions"
        assert event.correlation_id == "corr-42"
        assert event.payload["tool"] == "evaluate_expression"
        assert event.payload["args"] == {"expression": "2 ** 10 + sqrt(16)"}
        assert event.payload["user_id"] == "anonymous"
        assert RFC3339_UTC.match(event.payload["timestamp"])


async def test_rule_correction_is_purified_with_warnings(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        response = await client.post(
            "/execute",
            json={"tool": "echo", "args": {"message": "bell\u0007 and\u200b zero-width"}},
        )
        body = response.json()
        assert response.status_code == 200
        assert body["orthodoxy_status"] == "purified"
        assert body["result"] == {"message": "bell and zero-width"}
        assert body["warnings"] == ["removed 2 control character(s)"]
        [row] = await audit_rows(backend)
        assert row.orthodoxy_status == "purified"
        assert row.warnings == body["warnings"]
        assert row.result == {"message": "bell and zero-width"}


async def test_invalid_arguments_are_heretical_audited_and_not_run(
    backend: Backend, gateway: GatewayClient, calls: Calls
):
    async with gateway() as client:
        response = await client.post(
            "/execute", json={"tool": "login", "args": {"username": 7, "extra": True}}
        )
        assert response.status_code == 422
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        assert problem["code"] == "VALIDATION_FAILED"
        assert problem["orthodoxy_status"] == "heretical"
        fields = {error["field"] for error in problem["errors"]}
        assert fields == {"/", "/username"}  # missing password is reported at the root
        assert calls.count == 0

        [row] = await audit_rows(backend)
        outcome = (row.status, row.orthodoxy_status, row.error_code)
        assert outcome == ("rejected", "heretical", "VALIDATION_FAILED")
        assert row.conclave_id == problem["conclave_id"]
        event = await _one_event(backend, problem["conclave_id"])
        assert event.payload["orthodoxy_status"] == "heretical"


async def test_arguments_that_are_not_an_object_are_rejected_and_audited(
    backend: Backend, gateway: GatewayClient
):
    async with gateway() as client:
        response = await client.post("/execute", json={"tool": "echo", "args": ["hi"]})
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "/"
        [row] = await audit_rows(backend)
        assert row.args == ["hi"] and row.status == "rejected"


async def test_unknown_tool_is_404_and_still_audited(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        response = await client.post("/execute", json={"tool": "rm_rf", "args": {"path": "/"}})
        assert response.status_code == 404
        problem = response.json()
        assert problem["code"] == "UNKNOWN_TOOL"
        [row] = await audit_rows(backend)
        recorded = (row.tool_name, row.requested_tool, row.orthodoxy_status)
        assert recorded == ("rm_rf", "rm_rf", "heretical")
        event = await _one_event(backend, problem["conclave_id"])
        assert event.payload["tool"] == "rm_rf"


async def test_executor_error_is_reported_and_audited(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        response = await client.post(
            "/execute", json={"tool": "evaluate_expression", "args": {"expression": "1/0"}}
        )
        assert response.status_code == 422
        assert response.json()["code"] == "INVALID_EXPRESSION"
        assert response.json()["detail"] == "division by zero"
        [row] = await audit_rows(backend)
        assert (row.status, row.error_code) == ("failed", "INVALID_EXPRESSION")
        await _one_event(backend, row.conclave_id)


async def test_crash_is_502_without_leaking_internals(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        response = await client.post("/execute", json={"tool": "crash", "args": {}})
        assert response.status_code == 502
        assert response.json()["code"] == "TOOL_FAILED"
        assert "hunter2" not in response.text
        [row] = await audit_rows(backend)
        assert row.status == "failed" and "hunter2" not in (row.error_message or "")


async def test_time_out_is_504_and_audited(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        response = await client.post("/execute", json={"tool": "slow", "args": {}})
        assert response.status_code == 504
        assert response.json()["code"] == "TOOL_TIMEOUT"
        [row] = await audit_rows(backend)
        assert (row.status, row.error_code) == ("timeout", "TOOL_TIMEOUT")
        await _one_event(backend, row.conclave_id)


async def test_output_breaking_its_schema_is_heretical(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        response = await client.post("/execute", json={"tool": "bad_output", "args": {}})
        assert response.status_code == 502
        assert response.json()["code"] == "OUTPUT_INVALID"
        [row] = await audit_rows(backend)
        assert (row.status, row.orthodoxy_status) == ("failed", "heretical")


async def test_sensitive_fields_are_redacted_in_audit_and_event(
    backend: Backend, gateway: GatewayClient
):
    async with gateway() as client:
        args = {"username": "ada", "password": "s3cret", "pin": "1234"}
        response = await client.post("/execute", json={"tool": "login", "args": args})
        assert response.status_code == 200
        [row] = await audit_rows(backend)
        redacted = {"username": "ada", "password": "***REDACTED***", "pin": "***REDACTED***"}
        assert row.args == redacted
        event = await _one_event(backend, row.conclave_id)
        assert event.payload["args"] == redacted
        # A secret-looking name is redacted even for a tool that does not exist.
        await client.post("/execute", json={"tool": "nope", "args": {"api_key": "k"}})
        rows = await audit_rows(backend)
        assert rows[-1].args == {"api_key": "***REDACTED***"}


async def test_idempotency_key_replays_instead_of_running_twice(
    backend: Backend, gateway: GatewayClient, calls: Calls
):
    async with gateway() as client:
        request = {"tool": "billing.count", "args": {}}
        first = await client.post("/execute", json=request, headers={"Idempotency-Key": "k-1"})
        second = await client.post("/execute", json=request, headers={"Idempotency-Key": "k-1"})
        assert first.status_code == second.status_code == 200
        assert second.json() == first.json()
        assert second.headers["Idempotent-Replayed"] == "true"
        assert calls.count == 1
        assert len(await audit_rows(backend)) == 1

        different = {"tool": "echo", "args": {"message": "x"}}
        other = await client.post("/execute", json=different, headers={"Idempotency-Key": "k-1"})
        assert other.status_code == 409
        assert other.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
        await _one_event(backend, first.json()["conclave_id"])
        assert len(await published(backend)) == 1


async def test_failed_calls_replay_their_problem(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        request = {"tool": "echo", "args": {"message": 1}}
        first = await client.post("/execute", json=request, headers={"Idempotency-Key": "bad"})
        again = await client.post("/execute", json=request, headers={"Idempotency-Key": "bad"})
        assert first.status_code == again.status_code == 422
        assert again.json()["conclave_id"] == first.json()["conclave_id"]
        assert len(await audit_rows(backend)) == 1


async def test_wire_alias_executes_the_canonical_tool(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        catalogue = (await client.get("/tools", params={"names": "billing.count"})).json()
        alias = catalogue["tools"][0]["function"]["name"]
        assert re.match(r"^[a-zA-Z0-9_-]{1,64}$", alias) and alias != "billing.count"
        response = await client.post("/execute", json={"tool": alias, "args": {}})
        assert response.status_code == 200
        assert response.json()["tool"] == "billing.count"
        [row] = await audit_rows(backend)
        assert (row.tool_name, row.requested_tool) == ("billing.count", alias)


async def test_audit_row_is_readable_by_its_caller(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        body = (
            await client.post("/execute", json={"tool": "echo", "args": {"message": "hi"}})
        ).json()
        call = (await client.get(f"/calls/{body['conclave_id']}")).json()
        assert call["result"] == {"message": "hi"}
        assert call["status"] == "succeeded"
        assert RFC3339_UTC.match(call["created_at"])
        missing = await client.get("/calls/00000000-0000-0000-0000-000000000000")
        assert missing.status_code == 404 and missing.json()["code"] == "CALL_NOT_FOUND"


@pytest.mark.parametrize("message", ["line one\n\tline two", "non\u00a0breaking space", "plain"])
def test_echo_keeps_tabs_newlines_and_spaces(message: str) -> None:
    # Only control and format characters are removed; a message without any is left alone.
    [rule] = ECHO.rules
    assert rule({"message": message}, {"message": message}) is None
