"""The second outside attacker's findings on what the console round changed in the collector's
reach: each test asserts what a correct collector does, and fails on it as it stands."""

from __future__ import annotations

import httpx

from conclave.edge.app import create_app as create_edge_app
from conclave.platform.runtime import Platform
from tests.collector.conftest import collector_app, collector_settings, wait_terminal
from tests.conftest import Backend, eventually
from tests.edge import samples
from tests.edge.conftest import edge_settings, form
from tests.edge.test_pack_ownership import ALICE, BOB, OLGA, PEOPLE
from tests.httpserver import running_server

SECRET = "bob's survey of the upper dam"


async def test_a_user_cannot_read_another_users_packs_through_the_collector(
    backend: Backend, tmp_path
) -> None:
    # Impact: migration 0015 made each Evidence Pack readable by its uploader and operators
    # only, and docs/collector.md tells deployments to give the collector's `evidence` source
    # an operator's token (COLLECTOR_EDGE_API_TOKEN: "every pack for an operator's token").
    # The source calls the edge with that token and never as the expedition's requester (no
    # X-Conclave-Acting-User), so any user runs a discovery expedition with
    # `{"type": "evidence", "limit": 500}` into a collection of their own and reads everyone's
    # packs there: filenames, client metadata, extracted facts. No pack id needs guessing.
    edge = edge_settings(tmp_path / "edge", **PEOPLE)
    async with (
        Platform.open(edge, engine=backend.engine, bus=backend.bus) as platform,
        running_server(create_edge_app(edge, platform=platform)) as edge_url,
    ):
        async with httpx.AsyncClient(base_url=edge_url) as bob:
            uploaded = await bob.post(
                "/api/edge-intake/document",
                **form(("survey.pdf", samples.pdf(text="Dam survey")), {"site": SECRET}),
                headers=BOB,
            )
            assert uploaded.status_code == 200, uploaded.text
            [bobs_pack] = uploaded.json()["evidence_ids"]
            # The edge itself keeps the pack from alice.
            assert (
                await bob.get(f"/api/edge-intake/evidence/{bobs_pack}", headers=ALICE)
            ).status_code == 404

        settings = collector_settings(
            tmp_path / "collector",
            auth="enabled",
            api_tokens="tok-alice=alice,tok-bob=bob,tok-olga=olga",
            operators="olga",
            edge_api_base=edge_url,
            edge_api_token="tok-olga",  # as docs/collector.md says: an operator's token
            bridge_channels={},
        )
        async with collector_app(backend, settings) as (alice, _app):
            alice.headers.update(ALICE)
            accepted = await alice.post(
                "/expedition/run",
                json={
                    "expedition_type": "discovery",
                    "target_collections": ["alices-notes"],
                    "parameters": {
                        "sources": [{"type": "evidence", "limit": 500, "key": "evidence_id"}]
                    },
                },
                headers=ALICE,
            )
            assert accepted.status_code in (200, 201, 202), accepted.text
            await wait_terminal(alice, accepted.json()["expedition_id"])
            record = await alice.get(
                f"/collections/alices-notes/records/{bobs_pack}", headers=ALICE
            )
            assert SECRET not in record.text, "alice reads bob's pack through the collector"


async def test_the_evidence_bridge_does_not_show_one_users_packs_to_another(
    backend: Backend, tmp_path
) -> None:
    # Impact: with the default settings (the Evidence bridge on, COLLECTOR_SHARED_COLLECTIONS
    # = evidence), every pack's event (filename, client metadata, extracted facts, device) is
    # written into the shared `evidence` collection, which every authenticated user reads and
    # searches. Migration 0015 made the edge answer a pack to its uploader and operators only,
    # "exactly as a missing one" so that ids cannot be probed (docs/edge.md), and hid the packs
    # stored before it even from their uploaders; the collector hands all of them to anyone.
    # (docs/security.md mentions the shared collection; docs/edge.md promises otherwise.)
    edge = edge_settings(tmp_path / "edge", **PEOPLE)
    settings = collector_settings(
        tmp_path / "collector",
        auth="enabled",
        api_tokens="tok-alice=alice,tok-bob=bob,tok-olga=olga",
        operators="olga",
    )
    async with (
        Platform.open(edge, engine=backend.engine, bus=backend.bus) as platform,
        running_server(create_edge_app(edge, platform=platform)) as edge_url,
        collector_app(backend, settings) as (collector, _app),
    ):
        async with httpx.AsyncClient(base_url=edge_url) as bob:
            uploaded = await bob.post(
                "/api/edge-intake/document",
                **form(("survey.pdf", samples.pdf(text="Dam survey")), {"site": SECRET}),
                headers=BOB,
            )
        assert uploaded.status_code == 200, uploaded.text
        [bobs_pack] = uploaded.json()["evidence_ids"]
        path = f"/collections/evidence/records/{bobs_pack}"

        async def ingested() -> bool:
            answer = await collector.get(path, headers=OLGA)
            return answer.status_code == 200

        await eventually(ingested, timeout=15)  # the bridge has written it
        seen_by_alice = await collector.get(path, headers=ALICE)
        assert SECRET not in seen_by_alice.text, "alice reads bob's pack in the shared collection"
