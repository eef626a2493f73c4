"""Health, pipeline figures, the events list, and delivery through a bus outage."""

from __future__ import annotations

from collections.abc import Sequence

from conclave.platform.bus.base import Event
from conclave.platform.bus.entry import PublishRefused, Refusal
from conclave.platform.bus.memory import MemoryBus
from conclave.platform.errors import BusUnavailable
from tests.conftest import Backend, eventually
from tests.edge import samples
from tests.edge.conftest import CHANNEL, edge_app, edge_settings, form


class FlakyBus(MemoryBus):
    """The in-process bus with a switch that makes it unreachable."""

    down = False

    async def publish(self, events: Sequence[Event]) -> None:
        if self.down:
            raise BusUnavailable("bus switched off by the test")
        await super().publish(events)

    async def ping(self) -> None:
        if self.down:
            raise BusUnavailable("bus switched off by the test")


async def test_health_reports_store_bus_and_blob_store(backend: Backend, tmp_path) -> None:
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        body = (await client.get("/health")).json()
        assert body["status"] == "healthy"
        assert body["reldb"] == "connected"
        assert body["bus"] == "connected"
        assert body["blob_store"] == "available"
        for key in ("service", "version", "timestamp"):
            assert body[key]


async def test_events_survive_a_bus_outage_and_show_in_pipeline(sqlite_engine, tmp_path) -> None:
    bus = FlakyBus(claim_idle_seconds=0.5)
    backend = Backend("embedded", sqlite_engine, bus)
    async with edge_app(backend, edge_settings(tmp_path), bus=bus) as (client, _app):
        bus.down = True
        health = await client.get("/health")
        assert health.status_code == 503
        assert health.json()["bus"] == "disconnected"
        uploaded = []
        for name, media_type, content in (
            ("a.kml", "geo", samples.kml()),
            ("b.png", "image", samples.png()),
            ("c.json", "geo", samples.geojson()),
        ):
            response = await client.post(f"/api/edge-intake/{media_type}", **form((name, content)))
            assert response.status_code == 200, response.text
            uploaded += response.json()["evidence_ids"]

        async def retrying() -> dict:
            figures = (await client.get("/api/edge-intake/pipeline")).json()
            return figures if figures["retrying_outbox"] == 3 else {}

        figures = await eventually(retrying)
        assert figures["total_events"] == 3
        assert figures["pending_outbox"] == 3
        assert figures["by_type"]["geo"] == 2 and figures["by_type"]["image"] == 1
        assert figures["ingestion_rate"] == 0.6  # 3 events in the 5-minute window, per minute
        assert figures["last_event_at"].endswith("Z")
        page = (await client.get("/api/edge-intake/events?limit=2")).json()
        assert [e["evidence_id"] for e in page["events"]] == uploaded[::-1][:2]
        assert page["events"][0]["delivery"]["status"] == "retrying"

        bus.down = False

        async def delivered() -> list:
            events = await bus.read(CHANNEL)
            return events if len(events) == 3 else []

        await eventually(delivered)
        older = (await client.get(f"/api/edge-intake/events?cursor={page['next_cursor']}")).json()
        assert [e["evidence_id"] for e in older["events"]] == [uploaded[0]]
        assert older["next_cursor"] is None
        geo = (await client.get("/api/edge-intake/events?type=geo")).json()
        assert {e["media_type"] for e in geo["events"]} == {"geo"} and geo["count"] == 2
        assert geo["events"][0]["delivery"]["status"] == "published"
        unknown = await client.get("/api/edge-intake/events?type=sculpture")
        assert unknown.status_code == 404
        metrics = (await client.get("/metrics")).text
        assert 'conclave_edge_evidence_packs_total{media_type="geo"} 2.0' in metrics


class RefusingBus(MemoryBus):
    """The in-process bus refusing every event for a lasting reason of its own."""

    async def publish(self, events: Sequence[Event]) -> None:
        refusals = [Refusal(event.event_id, "refused by the bus", lasting=True) for event in events]
        raise PublishRefused(refusals)


async def test_a_quarantined_event_is_shown_as_such_not_as_pending(sqlite_engine, tmp_path) -> None:
    bus = RefusingBus(claim_idle_seconds=0.5)
    backend = Backend("embedded", sqlite_engine, bus)
    async with edge_app(backend, edge_settings(tmp_path), bus=bus) as (client, _app):
        response = await client.post("/api/edge-intake/image", **form(("b.png", samples.png())))
        assert response.status_code == 200, response.text

        async def set_aside() -> dict:
            figures = (await client.get("/api/edge-intake/pipeline")).json()
            return figures if figures["quarantined_outbox"] == 1 else {}

        figures = await eventually(set_aside)
        assert (figures["pending_outbox"], figures["retrying_outbox"]) == (0, 0)
        [event] = (await client.get("/api/edge-intake/events")).json()["events"]
        assert event["delivery"]["status"] == "quarantined"
        assert "refused by the bus" in event["delivery"]["last_error"]
