"""The evidence search: ``GET /api/edge-intake/evidence``, a page of Evidence Pack summaries newest
first, filtered, continued after a keyset cursor (:mod:`conclave.platform.keyset`).

A page holds summaries, never the client's metadata or the extracted facts (``GET
/evidence/{id}`` has those): a page of 100 costs the same whatever the packs carried. Each filter
that can pick few packs among many has an index ending in ``created_at`` (uploader, device, media
type, correlation id; migration 0015), so a page is a short index range walked backwards, not a
scan and a sort.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.edge.store import evidence_packs
from conclave.platform import keyset

_SUMMARY = [
    evidence_packs.c[name]
    for name in (
        "evidence_id",
        "media_type",
        "format",
        "mime_type",
        "filename",
        "sha256",
        "size_bytes",
        "device_id",
        "uploaded_by",
        "correlation_id",
        "part_index",
        "created_at",
        "log_leaf_hash",
    )
]
# A pack's position, taken out of its JSON columns by the store: the photo's EXIF GPS block (a
# few numbers) and the client's four coordinate keys, never the whole documents.
_POSITION = [
    evidence_packs.c.extracted[("exif", "gps")].label("exif_gps"),
    *(
        evidence_packs.c.client_metadata[key].label(f"metadata_{key}")
        for key in ("latitude", "lat", "longitude", "lon")
    ),
]


@dataclass(frozen=True)
class PackFilter:
    """What a search keeps; a field left None keeps every pack."""

    uploaded_by: str | None = None
    """Only this user's uploads (a user's search always has their own id here, so it never
    reaches a pack without a recorded uploader)."""
    media_type: str | None = None
    device_id: str | None = None
    correlation_id: str | None = None
    since: datetime | None = None
    """Created at or after."""
    until: datetime | None = None
    """Created before."""


async def search_packs(
    engine: AsyncEngine,
    kept: PackFilter,
    after: tuple[datetime, str] | None,
    limit: int,
) -> list[Any]:
    """Up to ``limit`` summaries of the packs ``kept`` keeps, newest first, after ``after``."""
    async with engine.connect() as connection:
        return list((await connection.execute(search_query(kept, after, limit))).all())


def search_query(kept: PackFilter, after: tuple[datetime, str] | None, limit: int) -> Select[Any]:
    """The query :func:`search_packs` runs."""
    packs = evidence_packs.c
    return keyset.newest_first(
        select(*_SUMMARY, *_POSITION),
        packs.created_at,
        packs.evidence_id,
        equal=(
            (packs.uploaded_by, kept.uploaded_by),
            (packs.media_type, kept.media_type),
            (packs.device_id, kept.device_id),
            (packs.correlation_id, kept.correlation_id),
        ),
        since=kept.since,
        until=kept.until,
        position=after,
        limit=limit,
    )


def position_of(row: Any) -> dict[str, Any] | None:
    """Where a searched pack was taken: ``{latitude, longitude, source}`` from its photo's EXIF
    GPS (``"exif"``), else from the client's ``latitude``/``lat`` and ``longitude``/``lon``
    (``"metadata"``; checked in range at upload), else ``None``."""
    gps = row.exif_gps
    if isinstance(gps, dict):
        found = _point(gps.get("latitude"), gps.get("longitude"))
        if found is not None:
            return {**found, "source": "exif"}
    latitude = row.metadata_latitude if row.metadata_latitude is not None else row.metadata_lat
    longitude = row.metadata_longitude if row.metadata_longitude is not None else row.metadata_lon
    found = _point(latitude, longitude)
    return None if found is None else {**found, "source": "metadata"}


def _point(latitude: Any, longitude: Any) -> dict[str, float] | None:
    values = []
    for value, bound in ((latitude, 90.0), (longitude, 180.0)):
        if isinstance(value, bool):
            return None
        try:
            number = float(value)  # a number, or the numeric string the upload accepted
        except (TypeError, ValueError):
            return None
        if not (math.isfinite(number) and -bound <= number <= bound):
            return None
        values.append(number)
    return {"latitude": values[0], "longitude": values[1]}
