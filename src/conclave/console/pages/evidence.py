"""Evidence: the edge's Evidence Packs, searched and paged (``GET /api/edge-intake/evidence``), one
pack's metadata and verification (``/evidence/{id}``, ``/evidence/{id}/verify``), and its bytes
to download, relayed as they arrive (``/evidence/{id}/content``).

The edge decides what the user sees: their own uploads, or everyone's for an operator. An
uploaded file is never shown by the console: it is always a download (``attachment``, a generic
type, a policy that forbids it everything), whatever its name or type says, because its bytes
are a stranger's.
"""

from __future__ import annotations

import asyncio
import unicodedata
from collections.abc import AsyncIterator
from typing import Annotated, Any
from urllib.parse import quote

import httpx
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from conclave.console.evidence_map import draw_map
from conclave.console.upstream import ServiceProblem, Services, path_segment, unusable_answer
from conclave.console.web import ServicesDep, SignedIn, page
from conclave.platform.media_types import media_type_names

router = APIRouter(include_in_schema=False)

EDGE = "/api/edge-intake/evidence"
PAGE_SIZE = 50
# A download is a file to save, never a document of this console: no script, no plug-in, no
# style, sandboxed even if a browser ignored the attachment disposition.
DOWNLOAD_POLICY = "default-src 'none'; sandbox"
_RELAYED = ("content-length", "content-encoding", "etag", "last-modified")


async def _filters(
    session: SignedIn,
    type: Annotated[str | None, Query(max_length=64)] = None,
    device_id: Annotated[str | None, Query(max_length=256)] = None,
    correlation_id: Annotated[str | None, Query(max_length=128)] = None,
    user_id: Annotated[str | None, Query(max_length=256)] = None,
    since: Annotated[str | None, Query(max_length=64)] = None,
    until: Annotated[str | None, Query(max_length=64)] = None,
) -> dict[str, str]:
    """The list's and the map's filters as the edge's search takes them (an uploader only from
    an operator: a user's search is their own, whatever the address says)."""
    chosen = {
        "type": type,
        "device_id": device_id,
        "correlation_id": correlation_id,
        "user_id": user_id if session.is_operator else None,
        "since": since,
        "until": until,
    }
    shown = {key: value for key, value in chosen.items() if value}
    return shown


Filters = Annotated[dict[str, str], Depends(_filters)]


def _page_of(found: Any) -> tuple[list[dict[str, Any]], str | None]:
    """The packs and next cursor of a page of the edge's search, checked before a page uses
    them (502 ``UPSTREAM_ANSWER_INVALID`` for anything else)."""
    listed = found.get("packs") if isinstance(found, dict) else None
    next_cursor = found.get("next_cursor") if isinstance(found, dict) else None
    if not isinstance(listed, list) or not isinstance(next_cursor, str | None):
        raise unusable_answer("edge", "a page of packs that is not one")
    return [pack for pack in listed if isinstance(pack, dict)], next_cursor


@router.get("/evidence")
async def evidence(
    request: Request,
    session: SignedIn,
    services: ServicesDep,
    shown: Filters,
    cursor: Annotated[str | None, Query(max_length=400)] = None,
) -> HTMLResponse:
    """A page of Evidence Packs; the edge validates every filter (its problem is shown)."""
    found = await services.get(
        "edge", EDGE, session, params={**shown, "cursor": cursor, "limit": PAGE_SIZE}
    )
    packs, next_cursor = _page_of(found)
    return page(
        request,
        "evidence.html",
        session,
        packs=packs,
        next_cursor=next_cursor,
        filters=shown,
        paged=bool(cursor),
        media_types=media_type_names(),
        thumbnail_types=THUMBNAIL_TYPES,
    )


MAP_PACKS = 500
"""Most packs the map looks at: the newest that match its filters, five of the edge's pages."""
_MAP_PAGE = 100


@router.get("/evidence/map")
async def evidence_map(
    request: Request, session: SignedIn, services: ServicesDep, shown: Filters
) -> HTMLResponse:
    """The geotagged packs among the newest :data:`MAP_PACKS` that match, on a map drawn here."""
    packs: list[dict[str, Any]] = []
    cursor = None
    more = False
    while len(packs) < MAP_PACKS:
        found = await services.get(
            "edge", EDGE, session, params={**shown, "cursor": cursor, "limit": _MAP_PAGE}
        )
        listed, cursor = _page_of(found)
        packs += listed
        if not cursor:
            break
        more = len(packs) >= MAP_PACKS
    drawn = draw_map(packs[:MAP_PACKS])
    return page(
        request,
        "evidence_map.html",
        session,
        drawn=drawn,
        looked_at=min(len(packs), MAP_PACKS),
        more=more,
        limit=MAP_PACKS,
        filters=shown,
    )


@router.get("/evidence/{evidence_id}")
async def evidence_detail(
    request: Request, evidence_id: str, session: SignedIn, services: ServicesDep
) -> HTMLResponse:
    """One pack: what was uploaded and extracted, and whether it still verifies."""
    path = f"{EDGE}/{path_segment(evidence_id, 'The evidence id')}"
    pack, verification = await asyncio.gather(
        services.get("edge", path, session), _verification(services, path, session)
    )
    return page(
        request,
        "evidence_pack.html",
        session,
        pack=pack,
        verification=verification,
        thumbnail_types=THUMBNAIL_TYPES,
    )


async def _verification(services: Services, path: str, session: Any) -> dict[str, Any]:
    """The pack's integrity check; a failure to check is a status to show, not a failed page."""
    try:
        result: dict[str, Any] = await services.get("edge", path + "/verify", session)
    except ServiceProblem as exc:
        return {"valid": False, "problem": exc.code.lower(), "detail": exc.detail}
    return result


@router.get("/evidence/{evidence_id}/content")
async def evidence_content(
    evidence_id: str, session: SignedIn, services: ServicesDep
) -> StreamingResponse:
    """The pack's bytes as a download, relayed from the edge as they arrive (never held whole)."""
    path = f"{EDGE}/{path_segment(evidence_id, 'The evidence id')}"
    pack = await services.get("edge", path, session)
    upstream = await services.open_stream("edge", path + "/content", session)
    headers = {name: upstream.headers[name] for name in _RELAYED if name in upstream.headers}
    headers |= {
        "Content-Disposition": attachment(str(pack.get("filename") or "evidence")),
        "Content-Security-Policy": DOWNLOAD_POLICY,
        "X-Content-Type-Options": "nosniff",
    }
    return StreamingResponse(
        _relay(upstream), media_type="application/octet-stream", headers=headers
    )


THUMBNAIL_TYPES = frozenset({"image", "landscape"})
"""Media types the edge makes thumbnails of (the pages show an ``<img>`` for these only)."""
THUMBNAIL_CACHE = "private, max-age=86400"


@router.get("/evidence/{evidence_id}/thumbnail")
async def evidence_thumbnail(
    evidence_id: str, session: SignedIn, services: ServicesDep
) -> StreamingResponse:
    """The pack's thumbnail, made by the edge, relayed from this console's origin (so the page's
    ``img-src 'self'`` holds) as the user: the edge decides whether they may see it."""
    path = f"{EDGE}/{path_segment(evidence_id, 'The evidence id')}/thumbnail"
    upstream = await services.open_stream("edge", path, session)
    if upstream.headers.get("content-type", "").split(";")[0].strip() != "image/webp":
        await upstream.aclose()
        raise unusable_answer("edge", "a thumbnail that is not WebP")
    headers = {name: upstream.headers[name] for name in _RELAYED if name in upstream.headers}
    headers |= {"X-Content-Type-Options": "nosniff", "Cache-Control": THUMBNAIL_CACHE}
    return StreamingResponse(_relay(upstream), media_type="image/webp", headers=headers)


async def _relay(upstream: httpx.Response) -> AsyncIterator[bytes]:
    # Closed however the download ends: completed, failed, or the browser gone.
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
    finally:
        await upstream.aclose()


def attachment(filename: str) -> str:
    """A ``Content-Disposition`` that saves the file as ``filename``: an ASCII fallback name with
    nothing a header or a file system could misread, and the exact name (RFC 6266/8187)."""
    plain = unicodedata.normalize("NFKD", filename).encode("ascii", "ignore").decode()
    plain = "".join(c if c.isalnum() or c in "._- " else "_" for c in plain).strip(" .")
    plain = plain[:150] or "evidence"
    exact = quote(filename[:255], safe="")
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{exact}"
