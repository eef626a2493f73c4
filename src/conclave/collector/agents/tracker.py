"""Tracker: acquisition from external sources."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from conclave.collector.agents.context import ExpeditionContext, ExpeditionFailed
from conclave.collector.parameter_secrets import resolve_headers
from conclave.collector.sources.base import SourceContext, SourceError, label


class Tracker:
    """Reads the raw items of each source named in a run, batch by batch."""

    name = "tracker"

    def __init__(self, context: ExpeditionContext) -> None:
        self._context = context

    async def track(self, spec: Mapping[str, Any]) -> AsyncIterator[tuple[str, list[Any]]]:
        """Yield ``(source label, batch of raw items)``; a failing source fails the run."""
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
        context = SourceContext(settings, self._context.correlation_id)
        try:
            async for batch in source.fetch(spec, context):
                yield where, batch
        except SourceError as exc:
            raise ExpeditionFailed(f"source {where} failed: {exc}", code=exc.code) from exc
