"""Audit finds drift between the two stores; healing repairs it."""

from __future__ import annotations

from conclave.collector.semantic.base import VectorRecord
from tests.collector.conftest import (
    collector_app,
    collector_settings,
    inbox,
    wait_terminal,
    write_jsonl,
)
from tests.conftest import eventually


async def _run(client, body) -> dict:
    response = await client.post("/expedition/run", json=body)
    record = await wait_terminal(client, response.json()["expedition_id"])
    assert record["status"] == "completed", record["errors"]
    return record["results"]


async def test_audit_and_healing_repair_a_deleted_vector(backend, tmp_path) -> None:
    source = write_jsonl(
        inbox(tmp_path) / "items.jsonl", [{"id": f"k{i}", "v": i} for i in range(4)]
    )
    async with collector_app(backend, collector_settings(tmp_path)) as (client, app):
        await _run(
            client,
            {
                "expedition_type": "discovery",
                "target_collections": ["docs"],
                "parameters": {"sources": [{"type": "file", "path": str(source), "key": "id"}]},
            },
        )

        async def indexed() -> bool:
            [info] = (await client.get("/collections")).json()["collections"]
            return info["vectors"] == 4 and info["pending_vectors"] == 0

        await eventually(indexed)
        memory = app.state.collector.memory
        await memory.delete("docs", ["k2"])  # drift: a vector lost in semantic memory
        await memory.upsert([VectorRecord("docs", "ghost", "0" * 64, "orphan")])

        audit = await _run(client, {"expedition_type": "audit", "target_collections": ["docs"]})
        consistency = audit["collections"]["docs"]["consistency"]
        assert audit["consistent"] is False
        assert consistency["missing_vectors"] == 1
        assert consistency["orphan_points"] == 1
        assert consistency["examples"]["missing_vectors"] == ["k2"]
        assert audit["collections"]["docs"]["quality"]["score"] == 1.0

        healing = await _run(client, {"expedition_type": "healing", "target_collections": ["docs"]})
        assert healing["collections"]["docs"]["missing_vectors_repaired"] == 1
        assert healing["collections"]["docs"]["orphan_points_removed"] == 1
        assert healing["consistent"] is True

        again = await _run(client, {"expedition_type": "audit"})
        assert again["consistent"] is True
        assert await memory.count("docs") == 4
