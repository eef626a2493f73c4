"""The ``evidence`` source: Evidence Pack metadata read through the edge service's HTTP API.

Spec fields: ``evidence_ids`` (packs to read, at most 500), or ``limit`` (the newest packs from
the edge event list, default 100). The edge address and token come from
``COLLECTOR_EDGE_API_BASE`` / ``COLLECTOR_EDGE_API_TOKEN``: the services talk over HTTP, never
through each other's code.

The collector calls the edge with its own token, so an id is never allowed to steer the request
elsewhere (``../pipeline``): ids must be Evidence Pack ids (canonical UUIDs), also the ones the
edge lists, and each is quoted as one path segment.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeGuard
from urllib.parse import quote

import httpx

from conclave.collector.sources.base import SourceContext, SourceError
from conclave.platform.auth import ACTING_USER_HEADER, acting_user_header_value
from conclave.settings import CollectorSettings

_PREFIX = "/api/edge-intake"
MAX_IDS = 500


def is_evidence_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is an Evidence Pack id as the edge makes them (a canonical UUID)."""
    if not isinstance(value, str) or len(value) != 36:
        return False
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def pack_path(evidence_id: str) -> str:
    """The edge path of one pack; the id is quoted as a single segment whatever it holds."""
    return f"{_PREFIX}/evidence/{quote(evidence_id, safe='')}"


class EvidenceSource:
    """Reads Evidence Packs from the edge intake service."""

    name = "evidence"
    owner_field = "uploaded_by"
    """A pack's record belongs to its uploader wherever it is bound: a shared collection shows
    it to them and operators only, as the edge shows the pack."""

    def validate(self, spec: Mapping[str, Any], settings: CollectorSettings) -> None:
        """Check ``evidence_ids`` / ``limit``."""
        ids = spec.get("evidence_ids")
        if ids is not None and (
            not isinstance(ids, list)
            or not 0 < len(ids) <= MAX_IDS
            or not all(is_evidence_id(i) for i in ids)
        ):
            raise ValueError(
                f"'evidence_ids' must be a list of 1 to {MAX_IDS} Evidence Pack ids "
                "(lower-case UUIDs such as 0b9e2c1a-5f3d-4c8e-9a7b-1d2e3f405162)"
            )
        limit = spec.get("limit", 100)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 500:
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
        if context.acting_user is not None:
            # The edge answers a pack only to its uploader and operators: the source reads as the
            # user who asked for the expedition, never with the collector's own reach (its token
            # must be a service identity, CONCLAVE_SERVICE_USERS, to act for someone).
            headers[ACTING_USER_HEADER] = acting_user_header_value(context.acting_user)
        async with httpx.AsyncClient(
            base_url=settings.edge_api_base, headers=headers, timeout=30
        ) as client:
            ids = spec.get("evidence_ids")
            if ids is None:
                ids = await self._listed_ids(client, int(spec.get("limit", 100)))
            elif not all(is_evidence_id(i) for i in ids):
                raise SourceError("'evidence_ids' holds a value that is not an Evidence Pack id")
            packs = [await self._get(client, pack_path(i), None) for i in ids]
            if packs:
                yield packs

    async def _listed_ids(self, client: httpx.AsyncClient, limit: int) -> list[str]:
        listing = await self._get(client, f"{_PREFIX}/events", {"limit": limit})
        events = listing.get("events") if isinstance(listing, dict) else None
        if not isinstance(events, list):
            raise SourceError("edge service answered an event list of an unexpected shape")
        # The edge is ours, but its answer still never decides which of its paths we call.
        ids = [e.get("evidence_id") for e in events if isinstance(e, dict)]
        checked = [i for i in ids if is_evidence_id(i)]
        if len(checked) != len(events):
            raise SourceError("edge service listed an event without a valid evidence_id")
        return checked

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
        except (ValueError, RecursionError) as exc:
            raise SourceError(f"edge service answered non-JSON for {path}") from exc
