"""Prometheus metrics: volume by tool and status, duration per tool, validation outcomes."""

from __future__ import annotations

from tests.conftest import Backend
from tests.gateway.conftest import GatewayClient


async def test_metrics_count_calls_with_bounded_labels(backend: Backend, gateway: GatewayClient):
    async with gateway() as client:
        await client.post("/execute", json={"tool": "echo", "args": {"message": "a"}})
        await client.post("/execute", json={"tool": "echo", "args": {"message": 1}})
        for name in ("made-up-1", "made-up-2"):
            await client.post("/execute", json={"tool": name, "args": {}})
        text = (await client.get("/metrics")).text
        assert 'conclave_gateway_tool_calls_total{status="succeeded",tool="echo"} 1.0' in text
        assert 'conclave_gateway_tool_calls_total{status="rejected",tool="echo"} 1.0' in text
        assert 'conclave_gateway_tool_calls_total{status="rejected",tool="__unknown__"} 2.0' in text
        assert "made-up" not in text
        assert 'conclave_gateway_validation_total{outcome="blessed"} 1.0' in text
        assert 'conclave_gateway_validation_total{outcome="heretical"} 3.0' in text
        assert 'conclave_gateway_tool_duration_seconds_count{tool="echo"} 1.0' in text
        assert (
            'conclave_gateway_http_requests_total{method="POST",route="/execute",status="200"} 1.0'
            in text
        )
