"""A discovery over many batches: each batch's write runs while the next is read, yet batches
land in order, the counts are per batch as before, and the inspection after the run still finds
a record whose stored data no longer matches its hash."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.collector import store
from conclave.collector.expedition_types import BUILTIN_TYPES
from conclave.collector.registry import ExpeditionRegistry
from conclave.collector.sources.base import SourceContext
from conclave.collector.sources.file import FileSource
from conclave.settings import CollectorSettings
from tests.collector.conftest import (
    collector_app,
    collector_settings,
    inbox,
    wait_terminal,
    write_jsonl,
)
from tests.conftest import Backend, eventually


def _discovery(source: dict[str, Any], collection: str = "sites") -> dict[str, Any]:
    return {
        "expedition_type": "discovery",
        "target_collections": [collection],
        "parameters": {"sources": [source]},
    }


async def test_batches_land_in_order_and_are_counted_each(backend: Backend, tmp_path) -> None:
    # Batches of two: "a" comes again, changed, in the third batch; "b" again, the same, in
    # the second.
    items = [
        {"id": "a", "v": 1},
        {"id": "b", "v": 1},
        {"id": "c", "v": 1},
        {"id": "b", "v": 1},
        {"id": "a", "v": 2},
        {"id": "d", "v": 1},
    ]
    write_jsonl(inbox(tmp_path) / "sites.jsonl", items)
    registry = ExpeditionRegistry(BUILTIN_TYPES, [FileSource(batch_size=2)])
    source = {"type": "file", "path": "sites.jsonl", "key": "id"}
    async with collector_app(backend, collector_settings(tmp_path), registry) as (client, _app):
        first = (await client.post("/expedition/run", json=_discovery(source))).json()
        record = await wait_terminal(client, first["expedition_id"])
        assert record["status"] == "completed", record["errors"]
        results = record["results"]
        assert results["records"] == {"inserted": 4, "updated": 1, "unchanged": 1, "rejected": 0}
        assert results["quality"]["checked"] == 4
        assert results["quality"]["score"] == 1.0
        stored = (await client.get("/collections/sites/records/a")).json()
        assert stored["data"] == {"id": "a", "v": 2}

        # Again: the first batch turns "a" back to 1, the third to 2 once more.
        again = (await client.post("/expedition/run", json=_discovery(source))).json()
        record = await wait_terminal(client, again["expedition_id"])
        assert record["results"]["records"] == {
            "inserted": 0,
            "updated": 2,
            "unchanged": 4,
            "rejected": 0,
        }
        stored = (await client.get("/collections/sites/records/a")).json()
        assert stored["data"] == {"id": "a", "v": 2}


class MeddlingSource:
    """Two batches; between them, once the first batch is stored, another hand rewrites two of
    its records in the store: one with other data, one with the same data as other text."""

    name = "meddling"

    def __init__(self, engine: AsyncEngine, backend: str) -> None:
        self._engine = engine
        self._json = "CAST(:doc AS JSON)" if backend == "production" else ":doc"

    def validate(self, spec: Mapping[str, Any], settings: CollectorSettings) -> None:
        """Nothing to check."""

    async def fetch(
        self, spec: Mapping[str, Any], context: SourceContext
    ) -> AsyncIterator[list[Any]]:
        """Yield the batches, meddling in between."""
        yield [{"id": "a", "v": 1}, {"id": "b", "v": 1}, {"id": "c", "v": 1}]

        async def stored() -> bool:
            return len(await store.get_records(self._engine, "sites", ["a", "b", "c"])) == 3

        await eventually(stored)
        rewrite = text(
            f"UPDATE collected_records SET data = {self._json} "
            "WHERE collection = 'sites' AND record_key = :key"
        )
        async with self._engine.begin() as connection:
            await connection.execute(rewrite, {"doc": '{"id": "a", "v": 666}', "key": "a"})
            await connection.execute(rewrite, {"doc": '{ "v":1,"id":"b" }', "key": "b"})
        yield [{"id": "d", "v": 1}]


async def test_the_inspection_finds_data_changed_after_it_was_bound(
    backend: Backend, tmp_path
) -> None:
    registry = ExpeditionRegistry(BUILTIN_TYPES, [MeddlingSource(backend.engine, backend.name)])
    async with collector_app(backend, collector_settings(tmp_path), registry) as (client, _app):
        spec = {"type": "meddling", "key": "id"}
        run = await client.post("/expedition/run", json=_discovery(spec))
        record = await wait_terminal(client, run.json()["expedition_id"])
        assert record["status"] == "completed", record["errors"]
        quality = record["results"]["quality"]
        # "b" holds other text for the same data: it still matches its hash.
        assert quality["checked"] == 4
        assert quality["corrupted"] == 1
        assert quality["issues"] == ["a: content hash mismatch"]
        assert quality["score"] == 0.75
