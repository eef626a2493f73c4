"""The ``evidence`` source: Evidence Pack metadata read through the edge service's HTTP API.

Spec fields: ``evidence_ids`` (packs to read), or ``limit`` (the newest packs from the edge event
list, default 100). The edge address and token come from ``COLLECTOR_EDGE_API_BASE`` /
``COLLECTOR_EDGE_API_TOKEN``: the services talk over HTTP, never through each other's code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from conclave.collector.sources.base import SourceContext, SourceError
from conclave.settings import CollectorSettings

_PREFIX = "/api/edge-intake"


class EvidenceSource:
    """Reads Evidence Packs from the edge intake service."""

    name = "evidence"

    def validate(self, spec: Mapping[str, Any], settings: CollectorSettings) -> None:
        """Check ``evidence_ids`` / ``limit``."""
        ids = spec.get("evidence_ids")
        if ids is not None and (
            not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)
        ):
            raise ValueError("'evidence_ids' must be a list of strings")
        limit = spec.get("limit", 100)
        if not isinstance(limit, int) or not 1 <= limit <= 500:
            raise ValueError("'limit' must be an integer from 1 to 500")

    async def fetch(
        self, spec: Mapping[str, Any], context: SourceContext
    ) -> AsyncIterator[list[Any]]:
        """Yield the packs' metadata."""
        settings = context.settings
        headers = {}
        token = settings.edge_api_token.get_secret_value()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if context.correlation_id:
            headers["X-Correlation-ID"] = context.correlation_id
        async with httpx.AsyncClient(
            base_url=settings.edge_api_base, headers=headers, timeout=30
        ) as client:
            ids = spec.get("evidence_ids")
            if ids is None:
                listing = await self._get(
                    client, f"{_PREFIX}/events", {"limit": int(spec.get("limit", 100))}
                )
                ids = [event["evidence_id"] for event in listing.get("events", [])]
            packs = [await self._get(client, f"{_PREFIX}/evidence/{i}", None) for i in ids]
            if packs:
                yield packs

    async def _get(
        self, client: httpx.AsyncClient, path: str, params: dict[str, Any] | None
    ) -> Any:
        try:
            response = await client.get(path, params=params)
        except httpx.HTTPError as exc:
            raise SourceError(f"edge service unreachable: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise SourceError(f"edge service answered HTTP {response.status_code} for {path}")
        try:
            return response.json()
        except ValueError as exc:
            raise SourceError(f"edge service answered non-JSON for {path}") from exc
