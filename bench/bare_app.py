"""The baseline: a bare FastAPI endpoint answering /execute with the gateway's response body."""

from __future__ import annotations

import uuid

from fastapi import FastAPI

from conclave.gateway.models import ExecuteRequest, ExecuteResponse

app = FastAPI()


@app.post("/execute")
async def execute(body: ExecuteRequest) -> ExecuteResponse:
    """Same request parsing and response shape as the gateway, without governance."""
    return ExecuteResponse(
        conclave_id=str(uuid.uuid4()),
        tool=body.tool,
        status="succeeded",
        orthodoxy_status="blessed",
        result=body.args,
        warnings=[],
        duration_ms=0.01,
    )
