"""Uploads of every media type become Evidence Packs with the documented facts and an event."""

from __future__ import annotations

import json

import pytest

from tests.conftest import Backend, eventually
from tests.edge import samples
from tests.edge.conftest import CHANNEL, edge_app, edge_settings, form

CASES = [
    ("image", "photo.jpg", samples.jpeg_with_gps),
    ("landscape", "scene.tif", samples.geotiff),
    ("audio", "note.wav", samples.wav),
    ("video", "clip.mp4", samples.mp4),
    ("document", "report.pdf", samples.pdf),
    ("cad", "plan.dxf", samples.dxf),
    ("geo", "walk.gpx", samples.gpx),
]


def _check_extracted(media_type: str, facts: dict) -> None:
    if media_type == "image":
        assert (facts["width"], facts["height"], facts["format"]) == (320, 240, "JPEG")
        assert facts["exif"]["captured_at_local"] == "2024-05-17T09:30:15"
        assert facts["exif"]["gps"]["latitude"] == pytest.approx(48.8584, abs=1e-4)
        assert facts["exif"]["gps"]["longitude"] == pytest.approx(-2.2945, abs=1e-4)
    elif media_type == "landscape":
        geotiff = facts["geo_reference"][0]
        assert geotiff["epsg"] == 4326
        assert geotiff["bounds"] == pytest.approx([10.0, 45.0, 11.0, 45.5])
    elif media_type == "audio":
        assert facts["codec"] == "pcm"
        assert facts["sample_rate_hz"] == 8000
        assert facts["channels"] == 1
        assert facts["duration_s"] == pytest.approx(0.5)
    elif media_type == "video":
        assert facts["container"] == "MPEG-4"
        assert (facts["width"], facts["height"]) == (64, 48)
        assert facts["duration_s"] == pytest.approx(1.0, abs=0.2)
        assert facts["video_codecs"]
    elif media_type == "document":
        assert facts["type"] == "pdf"
        assert facts["pages"] == 2
        assert facts["text_length"] >= len("Field report") * 2
    elif media_type == "cad":
        assert facts["version"] == "AC1024"
        assert facts["units"] == "Meters"
        assert {"WALLS", "PIPES"} <= set(facts["layers"])
        assert facts["entity_counts"] == {"LINE": 2, "CIRCLE": 1}
        assert facts["extents"] == pytest.approx([0.0, 0.0, 10.0, 5.0])
    elif media_type == "geo":
        assert facts["format"] == "gpx"
        assert facts["track_points"] == 3
        assert facts["bbox"] == pytest.approx([7.0, 45.0, 7.02, 45.02])


async def test_every_media_type_becomes_an_evidence_pack_and_an_event(
    backend: Backend, tmp_path, request
) -> None:
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        created = {}
        for media_type, name, make in CASES:
            content = make()
            response = await client.post(
                f"/api/edge-intake/{media_type}",
                **form(
                    (name, content),
                    {"latitude": 45.1, "lon": 7.2, "device_id": "cam-7"},
                    correlation_id="corr-1",
                    sampling_policy_ref="policy-a",
                ),
            )
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["status"] == "created"
            assert body["message"] == "1 Evidence Pack created."
            [evidence_id] = body["evidence_ids"]
            created[evidence_id] = (media_type, content)

            pack = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()
            assert pack["media_type"] == media_type
            assert pack["size_bytes"] == len(content)
            assert pack["metadata"]["device_id"] == "cam-7"
            assert pack["device_id"] == "cam-7"
            assert pack["correlation_id"] == "corr-1"
            assert pack["sampling_policy_ref"] == "policy-a"
            _check_extracted(media_type, pack["extracted"])
            stored = await client.get(pack["content_url"])
            assert stored.content == content

        async def published() -> list:
            events = await backend.bus.read(CHANNEL)
            return events if len(events) == len(CASES) else []

        events = await eventually(published)
        for event in events:
            media_type, content = created[event.payload["evidence_id"]]
            payload = event.payload
            assert payload["type"] == media_type
            assert payload["size"] == len(content)
            for key in (
                "sha256",
                "mime_type",
                "metadata",
                "extracted",
                "device_id",
                "correlation_id",
                "idempotency_key",
                "created_at",
            ):
                assert key in payload
            assert event.correlation_id == "corr-1"
        if backend.name == "production":
            redis = request.getfixturevalue("redis_client")
            prefix = request.getfixturevalue("redis_prefix")
            entries = await redis.xrange(f"{prefix}{CHANNEL}")
            assert len(entries) == len(CASES)
            assert json.loads(entries[0][1]["payload"])["evidence_id"] in created


async def test_each_file_part_is_one_pack_and_a_replay_creates_nothing(
    backend: Backend, tmp_path
) -> None:
    files = [("a.png", samples.png(10, 10)), ("b.png", samples.png(20, 10))]
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        first = await client.post(
            "/api/edge-intake/image", **form(files), headers={"Idempotency-Key": "k-1"}
        )
        assert first.status_code == 200, first.text
        assert first.json()["message"] == "2 Evidence Packs created."
        ids = first.json()["evidence_ids"]
        assert len(ids) == 2

        for headers, extra in (({"Idempotency-Key": "k-1"}, {}), ({}, {"idempotency_key": "k-1"})):
            replay = await client.post(
                "/api/edge-intake/image", **form(files, **extra), headers=headers
            )
            assert replay.status_code == 200
            assert replay.json()["status"] == "duplicate"
            assert replay.json()["evidence_ids"] == ids

        events = (await client.get("/api/edge-intake/events")).json()
        assert events["count"] == 2
        pipeline = (await client.get("/api/edge-intake/pipeline")).json()
        assert pipeline["total_events"] == 2


async def test_text_no_store_can_carry_in_a_parsed_file_is_escaped(backend: Backend, tmp_path):
    # A valid GeoJSON file whose geometry types (echoed in the extracted facts as keys) are a lone
    # surrogate and NUL: the pack is stored and published with them escaped, never a 500.
    features = [
        {"type": "Feature", "geometry": {"type": kind, "coordinates": [1, 2]}}
        for kind in ("\ud800", "x\x00y")
    ]
    document = json.dumps({"type": "FeatureCollection", "features": features}).encode()
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        response = await client.post("/api/edge-intake/geo", **form(("odd.geojson", document)))
        assert response.status_code == 200, response.text
        evidence_id = response.json()["evidence_ids"][0]
        pack = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()
        assert pack["extracted"]["geometry_types"] == {"\\ud800": 1, "xy": 1}

        async def published() -> list:
            return await backend.bus.read(CHANNEL)

        (event,) = await eventually(published)
        assert event.payload["extracted"]["geometry_types"] == {"\\ud800": 1, "xy": 1}
