"""A call left ``running`` by a gateway that died is settled by the others, once, with its event."""

from __future__ import annotations

from datetime import timedelta

from conclave.gateway.outcome import request_hash
from conclave.gateway.store import mcp_tool_calls
from conclave.platform.clock import utc_now
from tests.conftest import Backend, eventually
from tests.gateway.conftest import GatewayClient, audit_rows, published


async def _orphan(backend: Backend, conclave_id: str, age: timedelta, key: str | None) -> None:
    """The row a gateway writes before running a tool with side effects, then dies."""
    fingerprint = request_hash("billing.count", {}) if key else None
    async with backend.engine.begin() as connection:
        await connection.execute(
            mcp_tool_calls.insert().values(
                conclave_id=conclave_id,
                tool_name="billing.count",
                requested_tool="billing.count",
                args={},
                orthodoxy_status="blessed",
                status="running",
                user_id="anonymous",
                correlation_id="corr-orphan",
                idempotency_key=key,
                request_hash=fingerprint,
                created_at=utc_now() - age,
            )
        )


async def test_interrupted_call_is_settled_once_with_its_event(
    backend: Backend, gateway: GatewayClient
):
    old = "00000000-0000-4000-8000-000000000001"
    recent = "00000000-0000-4000-8000-000000000002"
    # billing.count has the default time-out (30 s in the test settings' default): the old one is
    # past it and the grace period, the recent one may still be running somewhere.
    await _orphan(backend, old, timedelta(minutes=5), key=None)
    await _orphan(backend, recent, timedelta(seconds=1), key=None)
    async with gateway():

        async def settled() -> list:
            return [r for r in await audit_rows(backend) if r.status != "running"]

        [row] = await eventually(settled)

        async def announced() -> list:
            return [e for e in await published(backend) if e.payload["conclave_id"] == old]

        [event] = await eventually(announced, timeout=60)
    assert (row.conclave_id, row.status, row.error_code) == (old, "failed", "INTERRUPTED")
    assert row.completed_at is not None and "unknown" in row.error_message
    assert event.payload["status"] == "failed" and event.correlation_id == "corr-orphan"
    still = {r.conclave_id: r.status for r in await audit_rows(backend)}
    assert still[recent] == "running"


async def test_retry_with_the_same_key_gets_the_interrupted_outcome(
    backend: Backend, gateway: GatewayClient
):
    old = "00000000-0000-4000-8000-000000000003"
    await _orphan(backend, old, timedelta(minutes=5), key="retry-me")
    async with gateway() as client:

        async def settled() -> bool:
            return all(r.status != "running" for r in await audit_rows(backend))

        await eventually(settled)
        response = await client.post(
            "/execute",
            json={"tool": "billing.count", "args": {}},
            headers={"Idempotency-Key": "retry-me"},
        )
    assert response.status_code == 503
    assert response.json()["code"] == "INTERRUPTED"
    assert len(await audit_rows(backend)) == 1  # the tool did not run again
