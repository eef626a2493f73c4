"""Tracker: acquisition from external sources."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from conclave.collector.agents.context import ExpeditionContext, ExpeditionFailed, LoopTurns
from conclave.collector.parameter_secrets import resolve_headers
from conclave.collector.sources.base import SourceContext, SourceError, label
from conclave.platform.inputs import escape_unsafe, holds_unsafe


class Tracker:
    """Reads the raw items of each source named in a run, batch by batch."""

    name = "tracker"

    def __init__(self, context: ExpeditionContext) -> None:
        self._context = context

    async def track(self, spec: Mapping[str, Any]) -> AsyncIterator[tuple[str, list[Any]]]:
        """Yield ``(source label, batch of raw items)``; a failing source fails the run.

        An item holding a value no store, bus or response can carry (a lone surrogate, NUL,
        NaN, an integer beyond 64 bits: a JSON API or a file we do not own may hold any) is
        yielded with those values escaped (:func:`~conclave.platform.inputs.escape_unsafe`):
        it is data to keep, but as it is it would fail its hash, its row or its vector, and
        with them the whole run, every later audit of the collection, or a list that shows it."""
        source = self._context.sources.get(str(spec.get("type")))
        if source is None:
            raise ExpeditionFailed(f"unknown source type {spec.get('type')!r}")
        where = label(spec)
        settings = self._context.settings
        try:
            # Secrets are resolved only now, for this call: the stored spec names them.
            spec = resolve_headers(spec, settings.source_secrets)
        except ValueError as exc:
            raise ExpeditionFailed(f"source {where}: {exc}") from exc
        context = SourceContext(
            settings, self._context.correlation_id, acting_user=self._context.acting_user()
        )
        try:
            async for batch in source.fetch(spec, context):
                yield where, await _storable(batch)
        except SourceError as exc:
            raise ExpeditionFailed(f"source {where} failed: {exc}", code=exc.code) from exc


async def _storable(batch: list[Any]) -> list[Any]:
    turns = LoopTurns()  # each item is walked: wide ones take long
    storable = []
    for item in batch:
        storable.append(escape_unsafe(item) if holds_unsafe(item) else item)
        await turns.take()
    return storable
