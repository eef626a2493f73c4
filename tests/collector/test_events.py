"""Bus input: requested events, the bridge from Evidence Packs, poison messages."""

from __future__ import annotations

import uuid

from conclave.collector.events import REQUESTED
from conclave.platform.bus.base import Event, dead_letter_channel
from tests.collector.conftest import collector_app, collector_settings, wait_terminal
from tests.conftest import eventually


async def test_requested_event_runs_once_even_when_redelivered(backend, tmp_path) -> None:
    event = Event(
        channel=REQUESTED,
        payload={"expedition_type": "audit", "priority": "low"},
        source="orchestrator",
        correlation_id="orch-1",
    )
    async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
        await backend.bus.publish([event, event])  # at-least-once: the same event twice

        async def queued() -> list:
            page = (await client.get("/expedition/history")).json()
            return page["expeditions"]

        [expedition] = await eventually(queued)
        record = await wait_terminal(client, expedition["expedition_id"])
        assert record["status"] == "completed"
        assert record["correlation_id"] == "orch-1"
        assert record["requested_by"] == "orchestrator"
        history = (await client.get("/expedition/history")).json()
        assert history["count"] == 1


async def test_invalid_requested_event_is_dead_lettered(backend, tmp_path) -> None:
    poison = Event(channel=REQUESTED, payload={"expedition_type": 42}, source="test")
    good = Event(channel=REQUESTED, payload={"expedition_type": "audit"}, source="test")
    settings = collector_settings(tmp_path, bus_max_deliveries=2)
    async with collector_app(backend, settings) as (client, _app):
        await backend.bus.publish([poison, good])

        async def dead() -> list:
            return await backend.bus.read(dead_letter_channel(REQUESTED))

        # The listener kept going: the good event after the poison one ran.
        async def ran() -> list:
            return (await client.get("/expedition/history")).json()["expeditions"]

        [expedition] = await eventually(ran)
        assert expedition["parameters"] == {}
        await eventually(dead, timeout=60)


async def test_evidence_pack_event_reaches_semantic_memory(backend, tmp_path) -> None:
    evidence_id = str(uuid.uuid4())
    event = Event(
        channel="edge_intake.evidence.created",
        payload={
            "evidence_id": evidence_id,
            "type": "document",
            "format": "pdf",
            "filename": "harbour-inspection.pdf",
            "metadata": {"site": "north harbour", "inspector": "Ada"},
            "extracted": {"pages": 3, "title": "Crane inspection report"},
            "content_path": f"/api/edge-intake/evidence/{evidence_id}/content",
        },
        source="edge",
        correlation_id="upload-7",
    )
    async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
        await backend.bus.publish([event])

        async def indexed() -> dict | None:
            listing = (await client.get("/collections")).json()["collections"]
            return next((c for c in listing if c["name"] == "evidence" and c["vectors"]), None)

        await eventually(indexed, timeout=60)
        record = (await client.get(f"/collections/evidence/records/{evidence_id}")).json()
        assert record["data"]["filename"] == "harbour-inspection.pdf"
        assert "content_path" not in record["data"]
        assert record["correlation_id"] == "upload-7"
        hits = (
            await client.get("/collections/evidence/search", params={"q": "crane inspection"})
        ).json()["hits"]
        assert hits[0]["record"]["record_key"] == evidence_id
        [run] = (await client.get("/expedition/history")).json()["expeditions"]
        assert run["expedition_type"] == "evidence_ingest"
        assert run["requested_by"] == "bridge"
