"""The checks every fault case ends with, on the requests that case made.

"Exactly one event" means exactly one event *id* on the stream for the item. The outbox relay
publishes at least once: a relay killed between XADD and marking its row published, or a reply
lost when Redis drops the connection, publishes the same event (same ``event_id``) again, and
consumers dedupe by ``event_id`` (docs/architecture.md). Two different event ids for one item
would be a real duplicate.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.conftest import eventually
from tests.faults.conftest import Topology

TOOL_CHANNEL = "conclave.mcp.actions"
EVIDENCE_CHANNEL = "edge_intake.evidence.created"
DISPATCH_CHANNEL = "graph.dispatch.completed"
TERMINAL = ("completed", "failed", "cancelled")
SETTLE_SECONDS = 30.0


@dataclass
class Ledger:
    """What a case sent: every request's key, and the answer of those that were acknowledged."""

    sent: set[str] = field(default_factory=set)
    acked: dict[str, Any] = field(default_factory=dict)

    def unacked(self) -> list[str]:
        return sorted(self.sent - set(self.acked))


def _event_ids_by(entries: list[dict[str, Any]], key: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for entry in entries:
        found[str(entry["payload"].get(key))].add(entry["event_id"])
    return found


async def check_executions(topology: Topology, ledger: Ledger) -> None:
    """Tool calls, by idempotency key: each acknowledged call has one audit row and one event on
    ``conclave.mcp.actions``; no key has two rows; every finished row has exactly one event."""
    if not ledger.sent:
        return
    keys = sorted(ledger.sent)
    rows = await topology.query(
        "SELECT conclave_id, idempotency_key, status FROM mcp_tool_calls "
        "WHERE user_id = 'fault-user' AND idempotency_key = ANY(:keys)",
        keys=keys,
    )
    by_key: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        by_key[row.idempotency_key].append(row)
    assert all(len(found) == 1 for found in by_key.values()), by_key  # never twice
    for key, conclave_id in ledger.acked.items():
        [row] = by_key[key]
        assert row.conclave_id == conclave_id
        assert row.status != "running", row
    finished = {row.conclave_id for row in rows if row.status != "running"}
    running = {row.conclave_id for row in rows if row.status == "running"}

    async def published() -> dict[str, set[str]] | None:
        events = _event_ids_by(await topology.entries(TOOL_CHANNEL), "conclave_id")
        return events if finished <= set(events) else None

    events = await eventually(published, timeout=SETTLE_SECONDS)
    assert all(len(events[conclave_id]) == 1 for conclave_id in finished), events
    assert not running & set(events)  # an unfinished call has not been announced


async def check_uploads(topology: Topology, ledger: Ledger, files_per_upload: int = 1) -> None:
    """Uploads, by idempotency key: each acknowledged upload has exactly its Evidence Packs (the
    ids it was answered), no key has two sets of packs, every pack has exactly one event, and
    its event turned into exactly one expedition that finished."""
    if not ledger.sent:
        return
    rows = await topology.query(
        "SELECT evidence_id, idempotency_key, event_id FROM edge_evidence_packs "
        "WHERE idempotency_key = ANY(:keys)",
        keys=sorted(ledger.sent),
    )
    by_key: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        by_key[row.idempotency_key].add(row.evidence_id)
    assert all(len(packs) == files_per_upload for packs in by_key.values()), by_key
    for key, evidence_ids in ledger.acked.items():
        assert by_key[key] == set(evidence_ids), (key, by_key[key], evidence_ids)
    expected = {row.evidence_id: row.event_id for row in rows}

    async def published() -> dict[str, set[str]] | None:
        events = _event_ids_by(await topology.entries(EVIDENCE_CHANNEL), "evidence_id")
        return events if set(expected) <= set(events) else None

    events = await eventually(published, timeout=SETTLE_SECONDS)
    for evidence_id, event_id in expected.items():
        assert events[evidence_id] == {event_id}, (evidence_id, events[evidence_id])

    # The collector's bridge turns each event into one evidence_ingest expedition.
    async def bridged() -> dict[str, list[str]] | None:
        rows = await topology.query(
            "SELECT expedition_id, parameters->'event'->>'evidence_id' AS evidence_id "
            "FROM collector_expeditions WHERE expedition_type = 'evidence_ingest' "
            "AND parameters->'event'->>'evidence_id' = ANY(:ids)",
            ids=sorted(expected),
        )
        found: dict[str, list[str]] = defaultdict(list)
        for row in rows:
            found[row.evidence_id].append(row.expedition_id)
        return found if found and set(expected) <= set(found) else None

    if not expected:
        return
    expeditions = await eventually(bridged, timeout=SETTLE_SECONDS)
    assert all(len(ids) == 1 for ids in expeditions.values()), expeditions
    await check_expeditions(topology, [ids[0] for ids in expeditions.values()])


async def check_dispatches(topology: Topology, ledger: Ledger) -> None:
    """Dispatches, by correlation id: each acknowledged dispatch (its trace id) has exactly one
    audit event on ``graph.dispatch.completed``; no correlation id has two."""
    if not ledger.sent:
        return

    async def published() -> list[dict[str, Any]] | None:
        entries = await topology.entries(DISPATCH_CHANNEL)
        traces = {entry["payload"]["trace_id"] for entry in entries}
        return entries if set(ledger.acked.values()) <= traces else None

    entries = await eventually(published, timeout=SETTLE_SECONDS)
    by_trace = _event_ids_by(entries, "trace_id")
    for trace_id in ledger.acked.values():
        assert len(by_trace[trace_id]) == 1, by_trace[trace_id]
    by_correlation = _event_ids_by(entries, "correlation_id")
    for correlation_id in ledger.sent:
        assert len(by_correlation.get(correlation_id, set())) <= 1, correlation_id


async def check_expeditions(
    topology: Topology, expedition_ids: Iterable[str], timeout: float = SETTLE_SECONDS
) -> dict[str, Any]:
    """Each expedition exists once and reaches a terminal state, announced by exactly one
    terminal event; returns the rows by id."""
    ids = sorted(set(expedition_ids))
    if not ids:
        return {}

    async def settled() -> dict[str, Any] | None:
        rows = await topology.query(
            "SELECT * FROM collector_expeditions WHERE expedition_id = ANY(:ids)", ids=ids
        )
        if len(rows) == len(ids) and all(row.status in TERMINAL for row in rows):
            return {row.expedition_id: row for row in rows}
        return None

    rows = await eventually(settled, timeout=timeout)

    async def announced() -> dict[str, set[str]] | None:
        found: dict[str, set[str]] = defaultdict(set)
        for state in TERMINAL:
            channel = f"collector.expedition.run.{state}"
            for key, event_ids in _event_ids_by(
                await topology.entries(channel), "expedition_id"
            ).items():
                found[key] |= event_ids
        return found if set(ids) <= set(found) else None

    events = await eventually(announced, timeout=timeout)
    assert all(len(events[expedition_id]) == 1 for expedition_id in ids), events
    return rows


async def check_all_expeditions_settle(topology: Topology) -> None:
    """Every expedition the topology ever accepted (bridged ones included) ends terminal."""
    rows = await topology.query("SELECT expedition_id FROM collector_expeditions")
    await check_expeditions(topology, [row.expedition_id for row in rows])


async def gather_answers(*coroutines: Any) -> list[Any]:
    """Run requests concurrently; a dropped connection is an answer too (the exception)."""
    return list(await asyncio.gather(*coroutines, return_exceptions=True))
