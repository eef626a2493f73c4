"""The collector's `evidence` source reads Evidence Packs as the user who asked for the expedition
(``X-Conclave-Acting-User``), never with its own reach: a user's discovery copies their own packs,
not everyone's (a finding of the second outside attack on issue 21's console round)."""

from __future__ import annotations

import httpx

from conclave.edge.app import create_app as create_edge_app
from conclave.platform.runtime import Platform
from tests.collector.conftest import collector_app, collector_settings, wait_terminal
from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import edge_settings, form
from tests.edge.test_pack_ownership import ALICE, BOB, PEOPLE
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


async def test_with_a_service_token_a_users_discovery_copies_their_own_packs_only(
    backend: Backend, tmp_path
) -> None:
    edge = edge_settings(tmp_path / "edge", **PEOPLE)
    async with (
        Platform.open(edge, engine=backend.engine, bus=backend.bus) as platform,
        running_server(create_edge_app(edge, platform=platform)) as edge_url,
    ):
        async with httpx.AsyncClient(base_url=edge_url) as uploads:
            packs = {}
            for who, headers in (("alice", ALICE), ("bob", BOB)):
                uploaded = await uploads.post(
                    "/api/edge-intake/document",
                    **form((f"{who}.pdf", samples.pdf(text=f"{who}'s notes")), {"site": who}),
                    headers=headers,
                )
                assert uploaded.status_code == 200, uploaded.text
                [packs[who]] = uploaded.json()["evidence_ids"]
        settings = collector_settings(
            tmp_path / "collector",
            auth="enabled",
            api_tokens="tok-alice=alice,tok-bob=bob",
            edge_api_base=edge_url,
            edge_api_token="tok-gw",  # the edge's service identity (CONCLAVE_SERVICE_USERS)
            bridge_channels={},
        )
        async with collector_app(backend, settings) as (alice, _app):
            alice.headers.update(ALICE)
            accepted = await alice.post(
                "/expedition/run",
                json={
                    "expedition_type": "discovery",
                    "target_collections": ["alices-packs"],
                    "parameters": {
                        "sources": [{"type": "evidence", "limit": 500, "key": "evidence_id"}]
                    },
                },
                headers=ALICE,
            )
            assert accepted.status_code == 202, accepted.text
            done = await wait_terminal(alice, accepted.json()["expedition_id"])
            assert done["status"] == "completed", done
            own = await alice.get(
                f"/collections/alices-packs/records/{packs['alice']}", headers=ALICE
            )
            assert own.status_code == 200 and "alice" in own.text
            other = await alice.get(
                f"/collections/alices-packs/records/{packs['bob']}", headers=ALICE
            )
            assert other.status_code == 404
