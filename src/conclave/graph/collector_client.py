"""The collector step's data access: what the expedition service knows, over its HTTP API.

For every validated entity the step reads ``GET /collections/{name}/records/{entity id}`` in each
collection; for the query text it runs ``GET /collections/{name}/search``. An entity found nowhere
may trigger a discovery expedition (``POST /expedition/run``) when discovery sources are configured
(opt-in). The whole step has one time budget; when the expedition service is down or slow the step
reports itself degraded with what it managed to read, and never makes anything up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from conclave.platform.auth import ACTING_USER_HEADER, acting_user_header_value
from conclave.platform.logs import correlation_id_var
from conclave.platform.urls import path_segment
from conclave.settings import GraphSettings

# The expedition service caps ``q`` at 2,000 characters; longer queries are cut rather than sent
# to a guaranteed 422.
_MAX_SEARCH_CHARS = 2000
_PARALLEL_REQUESTS = 16


class CollectorUnavailable(Exception):
    """The expedition service did not answer usefully (down, slow, refused, or a server error)."""


@dataclass
class LookupOutcome:
    """What the collector step found. ``known`` is ``None`` when the service could not be asked."""

    results: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    degraded: bool = False
    known: dict[str, bool] | None = None


class CollectorClient:
    """Thin async client of the expedition service's read API and expedition submission."""

    def __init__(self, http: httpx.AsyncClient, base_url: str, token: str = "") -> None:
        self._http = http
        self._base = base_url.rstrip("/")
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}

    def _headers(self, user: str | None) -> dict[str, str]:
        # The dispatch's correlation id travels on (the request context holds it), so the
        # collector's logs and the expeditions this dispatch asks for carry it too. The
        # dispatching user travels as the acting user: the collector answers with what that
        # user may read, not with what the graph's own identity may.
        headers = dict(self._auth)
        correlation_id = correlation_id_var.get()
        if correlation_id is not None:
            headers["X-Correlation-ID"] = correlation_id
        if user is not None:
            headers[ACTING_USER_HEADER] = acting_user_header_value(user)
        return headers

    async def _get(self, path: str, user: str | None, **params: Any) -> httpx.Response:
        try:
            response = await self._http.get(
                self._base + path, params=params or None, headers=self._headers(user)
            )
        except httpx.HTTPError as exc:
            detail = f"expedition service unreachable ({type(exc).__name__})"
            raise CollectorUnavailable(detail) from exc
        if response.status_code in (401, 403):
            raise CollectorUnavailable(f"expedition service refused ({response.status_code})")
        if response.status_code >= 500:
            raise CollectorUnavailable(f"expedition service error ({response.status_code})")
        return response

    async def collections(self, user: str | None = None) -> list[str]:
        """Names of the collections ``user`` may read."""
        response = await self._get("/collections", user)
        if response.status_code != 200:
            raise CollectorUnavailable(f"listing collections answered {response.status_code}")
        return [item["name"] for item in response.json().get("collections", [])]

    async def record(
        self, collection: str, key: str, user: str | None = None
    ) -> dict[str, Any] | None:
        """One record by key, ``None`` when the collection has no such record (an empty key
        names none)."""
        if not key:
            return None
        path = f"/collections/{path_segment(collection)}/records/{path_segment(key)}"
        response = await self._get(path, user)
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise CollectorUnavailable(f"record lookup answered {response.status_code}")
        return response.json()  # type: ignore[no-any-return]

    async def search(
        self, collection: str, text: str, limit: int, user: str | None = None
    ) -> list[dict[str, Any]]:
        """Semantic hits (``score`` + ``record``), best first; none when the collection is gone."""
        path = f"/collections/{path_segment(collection)}/search"
        response = await self._get(path, user, q=text[:_MAX_SEARCH_CHARS], limit=limit)
        if response.status_code == 404:
            return []
        if response.status_code != 200:
            raise CollectorUnavailable(f"search answered {response.status_code}")
        return response.json().get("hits", [])  # type: ignore[no-any-return]

    async def run_discovery(self, body: dict[str, Any], user: str | None = None) -> dict[str, Any]:
        """Queue an expedition; the service's 202 body."""
        try:
            response = await self._http.post(
                self._base + "/expedition/run", json=body, headers=self._headers(user)
            )
        except httpx.HTTPError as exc:
            detail = f"expedition service unreachable ({type(exc).__name__})"
            raise CollectorUnavailable(detail) from exc
        if response.status_code != 202:
            raise CollectorUnavailable(f"discovery request answered {response.status_code}")
        return response.json()  # type: ignore[no-any-return]


def _fill(template: Any, entity: str) -> Any:
    if isinstance(template, str):
        quoted = path_segment(entity) if entity else ""
        return template.replace("{entity_url}", quoted).replace("{entity}", entity)
    if isinstance(template, list):
        return [_fill(item, entity) for item in template]
    if isinstance(template, dict):
        return {key: _fill(value, entity) for key, value in template.items()}
    return template


def _record_result(kind: str, record: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        **extra,
        "collection": record.get("collection"),
        "record_key": record.get("record_key"),
        "data": record.get("data"),
        "source": record.get("source"),
        "updated_at": record.get("updated_at"),
    }


class CollectorLookup:
    """The collector step: record lookups, semantic search and opt-in discovery, time-bounded."""

    def __init__(self, client: CollectorClient, settings: GraphSettings) -> None:
        self._client = client
        self._settings = settings
        # Per-replica throttle of discovery requests; losing it on restart only costs a repeat.
        self._discovered: dict[str, float] = {}

    async def lookup(
        self,
        text: str,
        entities: Sequence[dict[str, Any]],
        *,
        correlation_id: str | None = None,
        user: str | None = None,
    ) -> LookupOutcome:
        """Everything known about ``entities`` and ``text`` within the step's time budget."""
        outcome = LookupOutcome()
        if not entities and not (text and self._settings.collector_search_limit):
            outcome.known = {}
            return outcome
        try:
            async with asyncio.timeout(self._settings.collector_timeout_seconds):
                await self._lookup(text, entities, correlation_id, user, outcome)
        except TimeoutError:
            outcome.degraded = True
            outcome.warnings.append(
                "collector: expedition service did not answer within "
                f"{self._settings.collector_timeout_seconds:g} s; results may be incomplete"
            )
        except CollectorUnavailable as exc:
            outcome.degraded = True
            outcome.warnings.append(f"collector: {exc}; results may be incomplete")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            outcome.degraded = True
            outcome.warnings.append(
                f"collector: malformed answer from the expedition service ({type(exc).__name__})"
            )
        if outcome.degraded and outcome.known is not None:
            # A half-finished lookup cannot tell "unknown" from "not asked yet".
            outcome.known = None
        return outcome

    async def _collections(self, user: str | None) -> list[str]:
        wanted = self._settings.collector_collections
        names = wanted or await self._client.collections(user)
        return names[: self._settings.collector_max_collections]

    async def _lookup(
        self,
        text: str,
        entities: Sequence[dict[str, Any]],
        correlation_id: str | None,
        user: str | None,
        outcome: LookupOutcome,
    ) -> None:
        collections = await self._collections(user)
        gate = asyncio.Semaphore(_PARALLEL_REQUESTS)

        async def bounded(call: Any) -> Any:
            async with gate:
                return await call

        ids = list(dict.fromkeys(entity["id"] for entity in entities))
        pairs = [(entity, name) for entity in ids for name in collections]
        lookups = [bounded(self._client.record(name, entity, user)) for entity, name in pairs]
        limit = self._settings.collector_search_limit
        searches = (
            [bounded(self._client.search(name, text, limit, user)) for name in collections]
            if text and limit
            else []
        )
        # Results of the finished calls are kept even when one of them fails.
        answers = await asyncio.gather(*lookups, *searches, return_exceptions=True)
        failure = next((a for a in answers if isinstance(a, BaseException)), None)
        known = dict.fromkeys(ids, False)
        seen: set[tuple[Any, Any]] = set()
        for (entity, _name), record in zip(pairs, answers[: len(pairs)], strict=True):
            if isinstance(record, dict):
                known[entity] = True
                seen.add((record.get("collection"), record.get("record_key")))
                outcome.results.append(_record_result("record", record, entity=entity))
        matches = []
        for hits in answers[len(pairs) :]:
            for hit in hits if isinstance(hits, list) else []:
                record = hit.get("record") or {}
                identity = (record.get("collection"), record.get("record_key"))
                if hit.get("score", 0.0) >= self._settings.collector_min_score and (
                    identity not in seen
                ):
                    seen.add(identity)
                    matches.append(_record_result("match", record, score=hit.get("score")))
        matches.sort(key=lambda item: item["score"], reverse=True)
        outcome.results.extend(matches)
        if failure is not None:
            raise failure
        outcome.known = known
        unknown = [entity for entity in ids if not known[entity]]
        if unknown and self._settings.discovery_sources:
            await self._discover(unknown, correlation_id, user, outcome)

    async def _discover(
        self,
        entities: list[str],
        correlation_id: str | None,
        user: str | None,
        outcome: LookupOutcome,
    ) -> None:
        now = time.monotonic()
        cooldown = self._settings.discovery_cooldown_seconds
        self._discovered = {k: t for k, t in self._discovered.items() if now - t < cooldown}
        for entity in entities:
            if entity in self._discovered:
                continue
            self._discovered[entity] = now
            body = {
                "expedition_type": "discovery",
                "target_collections": [self._settings.discovery_collection],
                "parameters": {"sources": _fill(self._settings.discovery_sources, entity)},
                "correlation_id": correlation_id,
            }
            try:
                accepted = await self._client.run_discovery(body, user)
            except CollectorUnavailable as exc:
                outcome.warnings.append(f"collector: discovery for {entity!r} not queued: {exc}")
                continue
            outcome.results.append(
                {
                    "kind": "expedition",
                    "entity": entity,
                    "expedition_id": accepted.get("expedition_id"),
                    "status": accepted.get("status"),
                    "status_url": accepted.get("status_url"),
                    "collection": self._settings.discovery_collection,
                }
            )
