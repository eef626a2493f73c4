"""Records the Evidence bridge copies from packs into the shared ``evidence`` collection stay as
private as the packs: a user finds, reads and counts their own and those nobody owns; operators
all of them. The attack this closes (issue 21's outside attack): bob uploads a document whose
metadata names a site; alice, who may search the shared collection, found it there."""

from __future__ import annotations

import uuid

import httpx

from conclave.edge.app import create_app as create_edge_app
from conclave.platform.bus.base import Event
from conclave.platform.runtime import Platform
from tests.collector.conftest import collector_app, collector_settings
from tests.conftest import Backend, eventually
from tests.edge import samples
from tests.edge.conftest import edge_settings, form
from tests.edge.test_pack_ownership import ALICE, BOB, OLGA, PEOPLE
from tests.httpserver import running_server

SECRET = "bob's survey of the upper dam"
ALICES = "alice's survey of the lower weir"


async def _upload(client: httpx.AsyncClient, who: dict[str, str], site: str) -> str:
    uploaded = await client.post(
        "/api/edge-intake/document",
        **form(("survey.pdf", samples.pdf(text="Dam survey")), {"site": site}),
        headers=who,
    )
    assert uploaded.status_code == 200, uploaded.text
    [evidence_id] = uploaded.json()["evidence_ids"]
    return evidence_id


async def test_a_user_finds_only_their_own_packs_in_the_shared_evidence_collection(
    backend: Backend, tmp_path
) -> None:
    edge = edge_settings(tmp_path / "edge", **PEOPLE)
    collector = collector_settings(
        tmp_path / "collector",
        auth="enabled",
        api_tokens="tok-alice=alice,tok-bob=bob,tok-olga=olga",
        operators="olga",
    )
    async with (
        Platform.open(edge, engine=backend.engine, bus=backend.bus) as platform,
        running_server(create_edge_app(edge, platform=platform)) as edge_url,
        collector_app(backend, collector) as (client, _app),
        httpx.AsyncClient(base_url=edge_url) as uploads,
    ):
        bobs = await _upload(uploads, BOB, SECRET)
        alices = await _upload(uploads, ALICE, ALICES)

        async def both_indexed() -> dict | None:
            listing = (await client.get("/collections", headers=OLGA)).json()["collections"]
            found = next((c for c in listing if c["name"] == "evidence"), None)
            return (
                found if found and found["vectors"] == 2 and not found["pending_vectors"] else None
            )

        everything = await eventually(both_indexed, timeout=60)
        assert everything["records"] == 2

        # alice: her record only, by key, by search and in the counts.
        hidden = await client.get(f"/collections/evidence/records/{bobs}", headers=ALICE)
        assert hidden.status_code == 404
        assert hidden.json()["code"] == "RECORD_NOT_FOUND"
        assert SECRET not in hidden.text
        own = await client.get(f"/collections/evidence/records/{alices}", headers=ALICE)
        assert own.status_code == 200 and own.json()["data"]["metadata"]["site"] == ALICES
        search = await client.get(
            "/collections/evidence/search",
            params={"q": "survey of the upper dam", "limit": 10},
            headers=ALICE,
        )
        assert search.status_code == 200, search.text
        assert [hit["record"]["record_key"] for hit in search.json()["hits"]] == [alices]
        assert SECRET not in search.text
        [listed] = [
            c
            for c in (await client.get("/collections", headers=ALICE)).json()["collections"]
            if c["name"] == "evidence"
        ]
        assert (listed["records"], listed["vectors"]) == (1, 1)

        # bob finds his; olga, an operator, finds both.
        bob_search = await client.get(
            "/collections/evidence/search", params={"q": "upper dam"}, headers=BOB
        )
        assert [hit["record"]["record_key"] for hit in bob_search.json()["hits"]] == [bobs]
        olga_search = await client.get(
            "/collections/evidence/search", params={"q": "survey", "limit": 10}, headers=OLGA
        )
        assert {hit["record"]["record_key"] for hit in olga_search.json()["hits"]} == {
            bobs,
            alices,
        }


async def test_a_pack_that_names_no_uploader_is_read_by_operators_only(
    backend: Backend, tmp_path
) -> None:
    # An event without `uploaded_by` (an edge older than this field, or a pack stored before
    # uploaders were recorded): its record is nobody's, never everyone's.
    evidence_id = str(uuid.uuid4())
    event = Event(
        channel="edge_intake.evidence.created",
        payload={"evidence_id": evidence_id, "type": "document", "filename": "weir.pdf",
                 "metadata": {"site": SECRET}},
        source="edge",
    )  # fmt: skip
    collector = collector_settings(
        tmp_path,
        auth="enabled",
        api_tokens="tok-alice=alice,tok-olga=olga",
        operators="olga",
    )
    async with collector_app(backend, collector) as (client, _app):
        await backend.bus.publish([event])

        async def indexed() -> dict | None:
            listing = (await client.get("/collections", headers=OLGA)).json()["collections"]
            found = next((c for c in listing if c["name"] == "evidence"), None)
            return found if found and found["vectors"] == 1 else None

        await eventually(indexed, timeout=60)
        path = f"/collections/evidence/records/{evidence_id}"
        assert (await client.get(path, headers=OLGA)).status_code == 200
        assert (await client.get(path, headers=ALICE)).status_code == 404
        search = await client.get(
            "/collections/evidence/search", params={"q": "upper dam weir"}, headers=ALICE
        )
        assert search.json()["hits"] == []
