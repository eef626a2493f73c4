"""Every hostile value in every field of every operation: a clean 4xx, and events keep flowing.

The cases come from each running app's own ``/openapi.json`` (and, for tool calls, the tool
catalogue the app serves next to them), so a new route, field or tool is covered without touching
this file (:mod:`tests.hostile.value_matrix` says how they are generated and what each must get
back).

The apps run the production topology: PostgreSQL and Redis, the service under test plus a
gateway and a collector replica over the same store and bus, as deployed. Besides each answer,
three things are checked, because one request once stopped event delivery for every service (an
event the bus could not encode, retried for ever at the head of the outbox):

* after each operation's cases, every event they committed reached the bus (none left behind,
  none quarantined: the boundary must refuse what cannot be published before anything is
  written);
* after each operation's cases, canary events still arrive: a governed ``echo`` call (an event
  handed straight to the relay) and a queued expedition (an event the relay finds by polling the
  outbox, the path a poison row blocks);
* after all cases, every read answers as it did before: no stored value breaks it for everyone.

Every failure names the configuration, operation, place and value; all are collected and reported
together, so one run lists every group that fails.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from conclave.collector.events import QUEUED
from conclave.gateway.events import CHANNEL as GATEWAY_CHANNEL
from conclave.platform.bus.base import EventBus
from conclave.platform.clock import as_utc, utc_now
from conclave.platform.db.schema import outbox_events
from tests.conftest import Backend
from tests.hostile.conftest import AUTH, CONFIGURATIONS, hostile_app
from tests.hostile.value_matrix import EXPECTATIONS, Case, Expect, Operation, Request, operations

# How long an event committed by a case may take to reach the bus, and a canary to arrive:
# the relay polls every 50 ms here, but a loaded 2-core machine can be many times slower, and a
# wait for what arrives costs nothing more for being long.
DELIVERY_SECONDS = 30.0


@dataclass
class Findings:
    """Failures, each naming the configuration, operation, place and value."""

    configuration: str
    lines: list[str] = field(default_factory=list)

    def add(self, operation: str, place: str, value: str, problem: str) -> None:
        self.lines.append(f"{self.configuration} | {operation} | {place} | {value} | {problem}")

    def render(self) -> str:
        header = "configuration | operation | place | value | what went wrong"
        return "\n".join([header, *sorted(set(self.lines))])


def _problem_defect(response: httpx.Response) -> str | None:
    """Why ``response`` is not a proper problem+json, or None."""
    kind = response.headers.get("content-type", "")
    if not kind.startswith("application/problem+json"):
        return f"{response.status_code} with content-type {kind!r}: {response.content[:160]!r}"
    try:
        body = json.loads(response.content.decode("utf-8"), parse_constant=_not_json)
    except ValueError as exc:
        return f"{response.status_code} problem body is not strict JSON ({exc})"
    if not isinstance(body, dict) or not isinstance(body.get("code"), str) or not body["code"]:
        return f"{response.status_code} problem without a code: {response.text[:160]}"
    if body.get("status") != response.status_code:
        return f"{response.status_code} problem says status {body.get('status')!r}"
    return None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


# What the base requests of operations that call a backend get here: nothing listens there.
UNREACHABLE = (502, 503, 504)


def verdict(case: Case, response: httpx.Response, base_status: int) -> str | None:
    """What is wrong with the answer to ``case``, or None."""
    status, expect = response.status_code, case.value.expect
    if expect is Expect.NO_SERVER_ERROR and (
        status < 400 or (status in UNREACHABLE and status == base_status)
    ):
        return None
    if status < 400:
        return f"accepted with {status}; expected {expect.value}"
    if status >= 500:
        return f"server error {status}: {response.content[:200]!r}; expected {expect.value}"
    defect = _problem_defect(response)
    if defect is not None:
        return defect
    code = response.json()["code"]
    accepted = EXPECTATIONS.get(expect)
    if accepted is not None and (status, code) not in accepted:
        return f"{status} {code}; expected {expect.value}"
    return None


async def send(client: httpx.AsyncClient, request: Request) -> httpx.Response:
    headers: dict[str, Any] = {**AUTH, **request.headers}
    if request.content_type is not None:
        headers["Content-Type"] = request.content_type
    return await client.request(request.method, request.url, content=request.content,
                                headers=headers)  # fmt: skip


async def _undelivered(backend: Backend, since: datetime, until: datetime) -> list[Any]:
    async with backend.engine.connect() as connection:
        rows = await connection.execute(
            select(outbox_events).where(
                outbox_events.c.published_at.is_(None),
                outbox_events.c.created_at >= since,
                outbox_events.c.created_at <= until,
            )
        )
        return list(rows.all())


async def check_delivered(
    backend: Backend, windows: list[tuple[datetime, Case]], until: datetime, findings: Findings
) -> None:
    """Every event committed while the cases ran reached the bus; blame each that did not on the
    case that was running when it was created."""
    if not windows:
        return
    deadline = time.monotonic() + DELIVERY_SECONDS
    while True:
        rows = await _undelivered(backend, windows[0][0], until)
        waiting = [row for row in rows if row.quarantined_at is None]
        if not waiting or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    for row in rows:
        created = as_utc(row.created_at)
        case = next((case for start, case in reversed(windows) if start <= created), windows[0][1])
        state = "quarantined" if row.quarantined_at is not None else "still unpublished"
        error = (row.last_error or "")[:120]
        problem = f"its {row.channel} event is {state} after {DELIVERY_SECONDS} s {error}"
        findings.add(case.operation, case.place, case.value.label, problem)


@dataclass
class Canary:
    """Ordinary requests whose events must reach the bus after each operation's cases."""

    gateway: httpx.AsyncClient
    collector: httpx.AsyncClient
    bus: EventBus
    blocked: dict[str, str] = field(default_factory=dict)
    sent: int = 0

    async def check(self, after: str, findings: Findings) -> None:
        self.sent += 1
        if "handed" not in self.blocked:
            call = {"tool": "echo", "args": {"message": f"canary {self.sent}"}}
            response = await self.gateway.post("/execute", json=call, headers=AUTH)
            assert response.status_code == 200, response.text
            conclave_id = response.json()["conclave_id"]
            await self._arrives("handed", GATEWAY_CHANNEL, "conclave_id", conclave_id, after,
                                findings)  # fmt: skip
        if "polled" not in self.blocked:
            run = {"expedition_type": "audit", "target_collections": ["canary"]}
            response = await self.collector.post("/expedition/run", json=run, headers=AUTH)
            assert response.status_code == 202, response.text
            expedition_id = response.json()["expedition_id"]
            await self._arrives("polled", QUEUED, "expedition_id", expedition_id, after, findings)

    async def _arrives(
        self, kind: str, channel: str, key: str, value: str, after: str, findings: Findings
    ) -> None:
        deadline = time.monotonic() + DELIVERY_SECONDS
        while time.monotonic() < deadline:
            if any(event.payload.get(key) == value for event in await self.bus.read(channel, 50)):
                return
            await asyncio.sleep(0.05)
        # Once blocked, every later canary would wait in vain: the first failure is the news.
        self.blocked[kind] = after
        findings.add(after, "-", "-", f"{kind} canary event ({channel}) not delivered within "
                     f"{DELIVERY_SECONDS} s: event delivery is blocked from here on")  # fmt: skip


@asynccontextmanager
async def topology(
    configuration: str, backend: Backend, data_dir: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, Canary]]:
    """The app under test, plus a gateway and a collector replica for the canaries."""
    service, overrides = CONFIGURATIONS[configuration]
    async with AsyncExitStack() as stack:
        target, _ = await stack.enter_async_context(
            hostile_app(service, backend, data_dir / "target", **overrides)
        )
        gateway, _ = await stack.enter_async_context(
            hostile_app("gateway", backend, data_dir / "gateway")
        )
        collector, _ = await stack.enter_async_context(
            hostile_app("collector", backend, data_dir / "collector")
        )
        yield target, Canary(gateway, collector, backend.bus)


async def _operations(client: httpx.AsyncClient) -> list[Operation]:
    document = (await client.get("/openapi.json", headers=AUTH)).json()
    catalogues = {}
    for path in document["paths"]:
        if path.endswith("/tools"):
            catalogue = (await client.get(path, headers=AUTH)).json()
            catalogues[path.removesuffix("/tools")] = [
                entry["function"] for entry in catalogue["tools"]
            ]
    return list(operations(document, catalogues))


@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
async def test_hostile_values_are_refused_and_events_keep_flowing(
    configuration: str, production: Backend, tmp_path: Path
) -> None:
    findings = Findings(configuration)
    async with topology(configuration, production, tmp_path) as (client, canary):
        matrix = await _operations(client)
        assert sum(len(operation.cases) for operation in matrix) > 0
        # Each operation's base request, before any hostile value: what an unreachable backend
        # answers here, and what a read answers before the matrix writes anything.
        before = {op.name: (await send(client, op.base)).status_code for op in matrix}
        for operation in matrix:
            windows: list[tuple[datetime, Case]] = []
            for case in operation.cases:
                windows.append((utc_now(), case))
                response = await send(client, case.request)
                problem = verdict(case, response, before[operation.name])
                if problem is not None:
                    findings.add(case.operation, case.place, case.value.label, problem)
            await check_delivered(production, windows, utc_now(), findings)
            await canary.check(operation.name, findings)
        # Whatever the matrix managed to store must not break a read for everyone afterwards.
        for operation in matrix:
            if operation.base.method != "GET":
                continue
            status = (await send(client, operation.base)).status_code
            if status >= 500 and status != before[operation.name]:
                findings.add(operation.name, "(base request)", "after all cases",
                             f"{before[operation.name]} before the matrix, {status} after it: a "
                             "stored hostile value breaks this read for every caller")  # fmt: skip
    assert not findings.lines, "hostile values not handled cleanly:\n" + findings.render()
