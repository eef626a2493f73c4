"""Built-in expedition types: ``discovery``, ``audit``, ``healing``, ``evidence_ingest``.

A type validates its parameters when the expedition is requested (a 422 then, rather than a failed
run later) and runs its plan of agents. More types plug in through the ``conclave.expeditions``
entry point group: an object with this module's :class:`ExpeditionType` shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from conclave.collector import store
from conclave.collector.agents.binder import Binder
from conclave.collector.agents.cartographer import Cartographer
from conclave.collector.agents.context import ExpeditionContext, content_hash
from conclave.collector.agents.inspector import Inspector
from conclave.collector.agents.restorer import Restorer
from conclave.collector.agents.tracker import Tracker
from conclave.collector.sources.base import Source, SourceContext
from conclave.platform.clock import utc_now
from conclave.settings import CollectorSettings


class ExpeditionType(Protocol):
    """A kind of expedition."""

    name: str
    description: str
    stages: tuple[str, ...]

    def validate(
        self,
        parameters: Mapping[str, Any],
        sources: Mapping[str, Source],
        settings: CollectorSettings,
    ) -> None:
        """Raise ``ValueError`` when the parameters cannot work."""
        ...

    async def run(self, context: ExpeditionContext) -> dict[str, Any]:
        """Run and return the results summary."""
        ...


class TakesNoParameters:
    """The validation of a type that needs no parameters (any given are ignored)."""

    def validate(
        self,
        parameters: Mapping[str, Any],
        sources: Mapping[str, Source],
        settings: CollectorSettings,
    ) -> None:
        """No parameters are needed."""


async def _collect(
    context: ExpeditionContext, collection: str, specs: list[Mapping[str, Any]]
) -> dict[str, Any]:
    """Tracker → Restorer → Binder over every source, then Inspector over what was bound."""
    progress = context.progress
    progress.enter("collecting", Tracker.name)
    progress.deploy(Restorer.name)
    progress.deploy(Binder.name)
    tracker, binder = Tracker(context), Binder(context)
    rejections: list[str] = []
    seen = backfilled = 0
    for spec in specs:
        restorer = Restorer(spec.get("key"), spec.get("defaults"))
        # A source that copies another user's data names, per item, whose it is.
        owner_field = getattr(context.sources.get(str(spec.get("type"))), "owner_field", None)
        async for where, batch in tracker.track(spec):
            restored = await restorer.restore_batch(batch)
            await binder.bind(collection, restored.records, where, owner_field)
            rejections += restored.rejected
            backfilled += restored.backfilled
            seen += len(batch)
            progress.advance(len(batch))
    stats = await binder.flush()
    context.metrics.records.labels("rejected").inc(len(rejections))
    bound = binder.bound
    progress.enter("inspecting", Inspector.name, total=len(bound))
    inspector = Inspector(context, context.parameters.get("required_fields") or ())
    inspection = await inspector.inspect_keys(collection, list(bound), written=bound)
    inspection.rejected = len(rejections)
    return {
        "collection": collection,
        "items_seen": seen,
        "records": {
            "inserted": stats.inserted,
            "updated": stats.updated,
            "unchanged": stats.unchanged,
            "rejected": len(rejections),
        },
        "backfilled": backfilled,
        "quality": inspection.summary(),
        "rejections": rejections[:20],
    }


class Discovery:
    """Sources → records: reads ``parameters.sources`` into the first target collection."""

    name = "discovery"
    description = "Collect records from sources (file, http_json, evidence, ...) into a collection."
    stages: tuple[str, ...] = ("collecting", "inspecting")

    def validate(
        self,
        parameters: Mapping[str, Any],
        sources: Mapping[str, Source],
        settings: CollectorSettings,
    ) -> None:
        """Every source must be known and well formed."""
        specs = parameters.get("sources")
        if not isinstance(specs, list) or not specs:
            raise ValueError("parameters.sources must be a non-empty list of source objects")
        for index, spec in enumerate(specs):
            if not isinstance(spec, dict):
                raise ValueError(f"parameters.sources[{index}] must be an object")
            source = sources.get(str(spec.get("type")))
            if source is None:
                known = ", ".join(sorted(sources))
                raise ValueError(f"parameters.sources[{index}].type must be one of: {known}")
            try:
                source.validate(spec, settings)
            except ValueError as exc:
                raise ValueError(f"parameters.sources[{index}]: {exc}") from exc

    async def run(self, context: ExpeditionContext) -> dict[str, Any]:
        """Collect, bind, inspect."""
        return await _collect(context, context.collection(), context.parameters["sources"])


class EvidenceIngest:
    """Evidence Packs of the edge service → records (collection ``evidence`` by default)."""

    name = "evidence_ingest"
    description = "Turn Evidence Packs (from a bus event or the edge API) into records."
    stages: tuple[str, ...] = ("collecting", "inspecting")
    _transport_fields = ("content_path", "content_url", "verify_url")

    def validate(
        self,
        parameters: Mapping[str, Any],
        sources: Mapping[str, Source],
        settings: CollectorSettings,
    ) -> None:
        """Needs ``event`` (an evidence-created payload) or ``evidence_ids``."""
        event = parameters.get("event")
        if isinstance(event, dict) and isinstance(event.get("evidence_id"), str):
            return
        if "evidence_ids" in parameters:
            sources["evidence"].validate({"evidence_ids": parameters["evidence_ids"]}, settings)
            return
        raise ValueError("parameters needs 'event' (with evidence_id) or 'evidence_ids'")

    async def run(self, context: ExpeditionContext) -> dict[str, Any]:
        """Bind the pack metadata, keyed by evidence id."""
        collection = context.collection("evidence")
        event = context.parameters.get("event")
        if isinstance(event, dict):
            pack = {k: v for k, v in event.items() if k not in self._transport_fields}
            spec: dict[str, Any] = {"type": "inline", "items": [pack], "key": "evidence_id"}
            context.sources = {**context.sources, "inline": _PackEventSource()}
        else:
            spec = {
                "type": "evidence",
                "evidence_ids": context.parameters["evidence_ids"],
                "key": "evidence_id",
            }
        return await _collect(context, collection, [spec])


class _PackEventSource:
    """The pack carried in the expedition itself (a bus event's payload)."""

    name = "inline"
    owner_field = "uploaded_by"  # the pack's record is its uploader's, as the pack is

    def validate(self, spec: Mapping[str, Any], settings: CollectorSettings) -> None:
        """Nothing to check: the items are already here."""

    async def fetch(
        self, spec: Mapping[str, Any], context: SourceContext
    ) -> AsyncIterator[list[Any]]:
        """Yield the carried items once."""
        yield list(spec["items"])


async def _targets(context: ExpeditionContext) -> list[str]:
    if context.target_collections:
        return context.target_collections
    return [row.collection for row in await store.collection_counts(context.engine)]


class Audit(TakesNoParameters):
    """Inspector + Cartographer over ``target_collections`` (all collections when empty)."""

    name = "audit"
    description = "Check record integrity and quality and map drift between the two stores."
    stages: tuple[str, ...] = ("inspecting", "mapping")

    async def run(self, context: ExpeditionContext) -> dict[str, Any]:
        """Report per collection."""
        report: dict[str, Any] = {}
        names = await _targets(context)
        inspections = {}
        context.progress.enter("inspecting", Inspector.name)
        inspector = Inspector(context, context.parameters.get("required_fields") or ())
        for name in names:
            inspections[name] = await inspector.inspect_collection(name)
        context.progress.enter("mapping", Cartographer.name)
        cartographer = Cartographer(context)
        for name in names:
            consistency = await cartographer.map(name)
            report[name] = {
                "quality": inspections[name].summary(),
                "consistency": consistency.summary(),
            }
        consistent = all(r["consistency"]["consistent"] for r in report.values())
        return {"collections": report, "consistent": consistent}


class Healing(TakesNoParameters):
    """Repairs what an audit finds: stale hashes, missing or stale vectors, orphan points."""

    name = "healing"
    description = "Repair drift: rewrite missing/stale vectors, drop orphan points, fix hashes."
    stages: tuple[str, ...] = ("mapping", "repairing", "verifying")

    async def run(self, context: ExpeditionContext) -> dict[str, Any]:
        """Map, repair, verify per collection."""
        names = await _targets(context)
        progress = context.progress
        cartographer, inspector = Cartographer(context), Inspector(context)
        report: dict[str, Any] = {}
        for name in names:
            progress.enter("mapping", Cartographer.name)
            inspection = await inspector.inspect_collection(name)
            before = await cartographer.map(name)
            progress.enter("repairing", Binder.name)
            progress.deploy(Restorer.name)
            hashes = await self._repair_hashes(context, name, inspection.corrupted)
            redo = before.missing_vectors + before.stale_vectors
            async with context.engine.begin() as connection:
                await store.mark_pending(connection, name, redo)
            await context.memory.delete(name, before.orphan_points)
            await context.indexer.drain()
            progress.enter("verifying", Cartographer.name)
            after = await cartographer.map(name)
            report[name] = {
                "hashes_repaired": hashes,
                "missing_vectors_repaired": len(before.missing_vectors),
                "stale_vectors_repaired": len(before.stale_vectors),
                "orphan_points_removed": len(before.orphan_points),
                "consistent_after": after.consistent,
            }
        return {
            "collections": report,
            "consistent": all(r["consistent_after"] for r in report.values()),
        }

    @staticmethod
    async def _repair_hashes(context: ExpeditionContext, name: str, keys: list[str]) -> int:
        rows = await store.get_records(context.engine, name, keys)
        async with context.engine.begin() as connection:
            for row in rows:
                await store.repair_hash(
                    connection, name, row.record_key, content_hash(row.data), utc_now()
                )
        return len(rows)


BUILTIN_TYPES: tuple[ExpeditionType, ...] = (Discovery(), Audit(), Healing(), EvidenceIngest())
