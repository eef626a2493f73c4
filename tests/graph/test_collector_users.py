"""The collector step reads what the dispatching user may read, not what the graph's own identity
may: the graph sends its caller as the acting user and the real expedition service answers for
that user."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from conclave.collector.app import create_app as create_collector_app
from conclave.graph.app import create_app as create_graph_app
from conclave.platform.runtime import Platform
from conclave.settings import CollectorSettings
from tests.conftest import Backend, eventually, serve_app
from tests.graph.conftest import graph_settings
from tests.graph.test_collector import BRIDGES
from tests.httpserver import running_server

TOKENS = "ann-token=ann,bob-token=bob,graph-token=graph-svc,gw-token=gw-svc"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _seed_ann_assets(api: httpx.AsyncClient, data_dir: Path) -> None:
    source = data_dir / "assets.jsonl"
    source.write_text("".join(json.dumps(item) + "\n" for item in BRIDGES))
    run = {
        "expedition_type": "discovery",
        "target_collections": ["assets"],
        "parameters": {"sources": [{"type": "file", "path": str(source), "key": "id"}]},
    }
    accepted = (await api.post("/expedition/run", json=run, headers=_bearer("ann-token"))).json()

    async def done() -> bool:
        status = await api.get(
            f"/expedition/status/{accepted['expedition_id']}", headers=_bearer("ann-token")
        )
        return status.json()["status"] == "completed"

    await eventually(done, timeout=60)


async def test_each_dispatch_sees_only_its_users_collections(backend: Backend, tmp_path) -> None:
    collector_settings = CollectorSettings(
        auto_migrate=False,
        auth="enabled",
        api_tokens=TOKENS,
        service_users="graph-svc",
        outbox_poll_seconds=0.05,
        data_dir=tmp_path,
        file_roots=[tmp_path],
        poll_seconds=0.05,
        load_entry_points=False,
    )
    async with Platform.open(collector_settings, engine=backend.engine, bus=backend.bus) as p:
        collector = create_collector_app(collector_settings, platform=p)
        async with running_server(collector) as url, httpx.AsyncClient(base_url=url) as api:
            await _seed_ann_assets(api, tmp_path)
            graph = create_graph_app(
                graph_settings(
                    collector_url=url,
                    collector_token="graph-token",
                    auth="enabled",
                    api_tokens=TOKENS,
                    service_users="gw-svc",  # the gateway's graph tool acts for its callers
                ),
                platform=p,
            )
            async with serve_app(graph) as client:
                dispatch = {"query": "", "validated_entities": ["pump-7"]}
                as_ann = await client.post("/dispatch", json=dispatch, headers=_bearer("ann-token"))
                as_bob = await client.post("/dispatch", json=dispatch, headers=_bearer("bob-token"))
                for_ann = {**_bearer("gw-token"), "X-Conclave-Acting-User": "ann"}
                acting = await client.post("/dispatch", json=dispatch, headers=for_ann)
                bob_for_ann = {**_bearer("bob-token"), "X-Conclave-Acting-User": "ann"}
                refused = await client.post("/dispatch", json=dispatch, headers=bob_for_ann)
    assert as_ann.json()["degraded"] == [] and as_bob.json()["degraded"] == []
    assert as_ann.json()["entities"] == [{"id": "pump-7", "known": True}]
    [record] = [item for item in as_ann.json()["results"] if item["kind"] == "record"]
    assert record["data"]["title"] == BRIDGES[2]["title"]
    # Bob's dispatch asks the collector as bob: ann's collection does not exist for him.
    assert as_bob.json()["entities"] == [{"id": "pump-7", "known": False}]
    assert [item for item in as_bob.json()["results"] if item["kind"] == "record"] == []
    # A service acting for ann dispatches as ann; the header from anyone else is refused, never
    # ignored (the dispatch would otherwise run as bob).
    assert acting.status_code == 200 and acting.json()["entities"] == [
        {"id": "pump-7", "known": True}
    ]
    assert refused.status_code == 403 and refused.json()["code"] == "ACTING_USER_FORBIDDEN"
