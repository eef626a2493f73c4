"""The event-loop lateness probe every service runs: a stall shows on /metrics, and it stops."""

from __future__ import annotations

import asyncio
import time

import httpx
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from conclave.platform.event_loop_probe import PROBE_TASK_NAME
from tests.conftest import eventually
from tests.httpserver import running_server
from tests.platform.conftest import demo_app

STALL_SECONDS = 0.2
LATENESS = "conclave_demo_event_loop_lateness_seconds"


def stalling_app() -> FastAPI:
    app = demo_app()

    @app.post("/stall")
    async def stall() -> dict[str, float]:
        """Hold the event loop the way CPU work in a coroutine does."""
        started = time.perf_counter()
        while time.perf_counter() - started < STALL_SECONDS:
            pass
        return {"held_seconds": time.perf_counter() - started}

    return app


async def lateness(client: httpx.AsyncClient) -> dict[str, float]:
    """The probe's figures on /metrics: wake-ups in all, wake-ups at least 0.1 s late, largest."""
    page = (await client.get("/metrics")).text
    samples = {
        (sample.name, sample.labels.get("le", "")): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
    }
    count = samples[(f"{LATENESS}_count", "")]
    return {
        "count": count,
        "late_by_100ms": count - samples[(f"{LATENESS}_bucket", "0.1")],
        "max": samples[("conclave_demo_event_loop_lateness_max_seconds", "")],
    }


def probe_tasks() -> list[asyncio.Task[object]]:
    return [task for task in asyncio.all_tasks() if task.get_name() == PROBE_TASK_NAME]


async def test_a_coroutine_holding_the_loop_shows_in_the_lateness_histogram() -> None:
    async with running_server(stalling_app()) as base, httpx.AsyncClient(base_url=base) as client:

        async def probing() -> dict[str, float] | None:
            figures = await lateness(client)
            return figures if figures["count"] >= 3 else None

        # The probe must be asleep when the stall begins, or it would only start after it.
        before = await eventually(probing)
        held = (await client.post("/stall")).json()["held_seconds"]

        async def recorded() -> dict[str, float] | None:
            figures = await lateness(client)
            return figures if figures["count"] > before["count"] + 1 else None

        after = await eventually(recorded)

    assert held >= STALL_SECONDS
    assert after["late_by_100ms"] >= before["late_by_100ms"] + 1
    assert after["max"] >= 0.1
    assert not probe_tasks()


async def test_the_probe_runs_only_while_the_service_serves() -> None:
    app = demo_app()
    async with running_server(app):
        assert len(probe_tasks()) == 1
    assert not probe_tasks()
