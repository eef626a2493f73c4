"""The recipe "add an expedition source" followed once: a source defined outside the package,
declared as a ``conclave.sources`` entry point, feeds a discovery into both stores."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from importlib.metadata import EntryPoint
from typing import Any

from conclave.collector.registry import SOURCES_GROUP, ExpeditionRegistry
from conclave.collector.sources.base import SourceContext
from conclave.settings import CollectorSettings
from tests.collector.conftest import collector_app, collector_settings, wait_terminal
from tests.conftest import Backend, eventually


class InventorySource:
    """A warehouse listing of ``count`` crates, two per batch (a plug-in's own source)."""

    name = "inventory"

    def validate(self, spec: Mapping[str, Any], settings: CollectorSettings) -> None:
        """``count`` crates, 1 to 1,000."""
        count = spec.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or not 0 < count <= 1000:
            raise ValueError("count must be an integer from 1 to 1000")

    async def fetch(
        self, spec: Mapping[str, Any], context: SourceContext
    ) -> AsyncIterator[list[Any]]:
        """Yield the crates in batches."""
        crates = [{"sku": f"sku-{n}", "name": f"crate {n}"} for n in range(spec["count"])]
        for start in range(0, len(crates), 2):
            yield crates[start : start + 2]


def installed(group: str) -> list[EntryPoint]:
    """What installing a distribution whose pyproject.toml declares the source adds:
    ``[project.entry-points."conclave.sources"]`` ``inventory = "<module>:InventorySource"``."""
    declared = EntryPoint("inventory", f"{__name__}:InventorySource", SOURCES_GROUP)
    return [declared] if group == SOURCES_GROUP else []


def discovery(**spec: Any) -> dict[str, Any]:
    return {
        "expedition_type": "discovery",
        "target_collections": ["warehouse"],
        "parameters": {"sources": [{"type": "inventory", "key": "sku", **spec}]},
    }


async def test_a_plugged_in_source_feeds_both_stores(backend: Backend, tmp_path) -> None:
    off = collector_settings(tmp_path)  # COLLECTOR_LOAD_ENTRY_POINTS=false: built-ins only
    assert "inventory" not in ExpeditionRegistry.load(off, find_plugins=installed).sources
    settings = collector_settings(tmp_path, load_entry_points=True)
    registry = ExpeditionRegistry.load(settings, find_plugins=installed)
    assert isinstance(registry.sources["inventory"], InventorySource)

    async with collector_app(backend, settings, registry) as (client, _app):
        listed = (await client.get("/expedition/types")).json()["sources"]
        assert "inventory" in listed

        refused = await client.post("/expedition/run", json=discovery(count=0))
        assert refused.status_code == 422, refused.text
        assert "count must be an integer" in refused.json()["detail"]

        accepted = await client.post("/expedition/run", json=discovery(count=5, name="north"))
        assert accepted.status_code == 202, accepted.text
        record = await wait_terminal(client, accepted.json()["expedition_id"])
        assert record["status"] == "completed", record
        assert record["results"]["records"]["inserted"] == 5

        # The structured store: each crate is a record, labelled with the source that made it.
        stored = (await client.get("/collections/warehouse/records/sku-3")).json()
        assert stored["data"] == {"sku": "sku-3", "name": "crate 3"}
        assert stored["source"] == "inventory:north"

        # The semantic memory: every record gets its vector, and search finds the crates.
        async def indexed() -> Any:
            listing = (await client.get("/collections")).json()["collections"]
            return [c for c in listing if c["name"] == "warehouse" and c["vectors"] == 5]

        await eventually(indexed, timeout=60)
        found = await client.get("/collections/warehouse/search", params={"q": "crate 3"})
        assert "sku-3" in {hit["record"]["record_key"] for hit in found.json()["hits"]}


class BrokenSource(InventorySource):
    """A plug-in whose construction fails (a missing setting of its own, say)."""

    name = "broken"

    def __init__(self) -> None:
        raise RuntimeError("no credentials for the warehouse API")


def test_a_plugin_that_fails_to_build_is_left_out(tmp_path) -> None:
    def with_broken(group: str) -> list[EntryPoint]:
        broken = EntryPoint("broken", f"{__name__}:BrokenSource", SOURCES_GROUP)
        return [broken, *installed(group)] if group == SOURCES_GROUP else []

    settings = collector_settings(tmp_path, load_entry_points=True)
    registry = ExpeditionRegistry.load(settings, find_plugins=with_broken)
    assert "broken" not in registry.sources
    assert isinstance(registry.sources["inventory"], InventorySource)
    assert {"file", "http_json", "evidence"} <= set(registry.sources)


def nothing() -> None:
    """A factory that builds nothing."""


class NamelessSource(InventorySource):
    @property
    def name(self) -> str:  # type: ignore[override]
        raise RuntimeError("config missing")


def test_a_plugin_that_builds_no_usable_object_is_left_out(tmp_path) -> None:
    def with_junk(group: str) -> list[EntryPoint]:
        junk = [
            EntryPoint("none", f"{__name__}:nothing", SOURCES_GROUP),
            EntryPoint("nameless", f"{__name__}:NamelessSource", SOURCES_GROUP),
        ]
        return [*junk, *installed(group)] if group == SOURCES_GROUP else []

    settings = collector_settings(tmp_path, load_entry_points=True)
    registry = ExpeditionRegistry.load(settings, find_plugins=with_junk)
    assert set(registry.sources) == {"file", "http_json", "evidence", "inventory"}
