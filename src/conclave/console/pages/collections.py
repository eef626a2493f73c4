"""Collections: each one the user may read, with its size in the structured store (records) and
in semantic memory (points), so drift between the two shows (``GET /collections``); and a
semantic search in one (``GET /collections/{name}/search``).

Drift is records minus points: vectors still pending, or missing or orphan points an audit
expedition would report and a healing one repair.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from conclave.console.upstream import path_segment
from conclave.console.web import ServicesDep, SignedIn, page

router = APIRouter(include_in_schema=False)

SEARCH_LIMIT = 20


@router.get("/collections")
async def collections(request: Request, session: SignedIn, services: ServicesDep) -> HTMLResponse:
    """The collections and their counts in both stores."""
    found = await services.get("collector", "/collections", session)
    rows = [_with_drift(item) for item in found.get("collections", []) if isinstance(item, dict)]
    return page(request, "collections.html", session, collections=rows)


@router.get("/collections/{name}/search")
async def search(
    request: Request,
    name: str,
    session: SignedIn,
    services: ServicesDep,
    q: Annotated[str | None, Query(max_length=2000)] = None,
) -> HTMLResponse:
    """Semantic search in one collection, best match first (the form alone without ``q``)."""
    segment = path_segment(name, "The collection name")
    result = None
    if q:
        result = await services.get(
            "collector",
            f"/collections/{segment}/search",
            session,
            params={"q": q, "limit": SEARCH_LIMIT},
        )
    return page(request, "collection_search.html", session, name=name, q=q or "", result=result)


def _with_drift(item: dict[str, Any]) -> dict[str, Any]:
    records, vectors = item.get("records"), item.get("vectors")
    drift = records - vectors if isinstance(records, int) and isinstance(vectors, int) else None
    return {**item, "drift": drift}
