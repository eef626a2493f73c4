"""Thumbnails of Evidence Packs (``GET /evidence/{id}/thumbnail``), made once and kept.

A pack's bytes never change, so neither does its thumbnail: it is made by a parser worker the
first time it is asked for (:mod:`conclave.edge.agents.thumbnail`) and kept beside the blobs,
under ``thumbnails/v1/ab/cd/<sha256>.webp``, for every later request and every pack of the same
content. A file that gives none (undecodable, too many pixels, past the time limit, crashing its
worker) is remembered too, as ``<sha256>.none`` holding why: a hostile file costs a worker once,
not on every view of its page. Nothing here is evidence: the folder may be deleted at any time
and is made again as it is asked for; ``v1`` changes when the rendering does.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from conclave.edge.parsing import ParserPool
from conclave.platform.errors import NotFound
from conclave.platform.problem_types import ProblemCode

THUMBNAIL_TYPES = frozenset({"image", "landscape"})
"""Media types whose packs may have a thumbnail."""
THUMBNAIL_FORMATS = frozenset({"jpeg", "png", "gif", "webp", "bmp", "tiff", "heif", "avif"})
"""Sniffed formats a thumbnail is made of (decoded by Pillow, or a TIFF by tifffile)."""
_MAX_REASON_BYTES = 600


class Thumbnails:
    """The thumbnail cache under ``root`` (the blob store's folder), filled by ``parsers``."""

    def __init__(self, root: Path, parsers: ParserPool, *, time_limit: float) -> None:
        self._root = root / "thumbnails" / "v1"
        self._parsers = parsers
        self._time_limit = time_limit

    def path_for(self, sha256: str) -> Path:
        """Where the thumbnail of the content ``sha256`` is kept."""
        return self._root / sha256[:2] / sha256[2:4] / f"{sha256}.webp"

    async def of(self, media_type: str, fmt: str, sha256: str, blob: Path) -> Path:
        """The thumbnail of a pack (its type, sniffed format, content and blob), made when it is
        not kept yet; 404 ``NO_THUMBNAIL`` saying why when the pack has none."""
        if media_type not in THUMBNAIL_TYPES or fmt not in THUMBNAIL_FORMATS:
            raise _none(f"No thumbnail is made of {media_type} packs in {fmt or 'this'} format.")
        target = self.path_for(sha256)
        kept = await asyncio.to_thread(_kept, target, blob)
        if kept == "made":
            return target
        if kept is not None:
            raise _none(kept)
        why = await self._parsers.thumbnail(str(blob), fmt, target, time_limit=self._time_limit)
        if why is None:
            if await asyncio.to_thread(target.is_file):
                return target
            raise _none("The thumbnail could not be kept.")  # the folder is gone, or full
        await asyncio.to_thread(_remember, target.with_suffix(".none"), why)
        raise _none(why)


def _kept(target: Path, blob: Path) -> str | None:
    """``"made"`` when the thumbnail is kept, why there is none when that is kept, ``None`` when
    it is still to be made; 404 ``CONTENT_MISSING`` without the pack's blob."""
    if target.is_file():
        return "made"
    refused = target.with_suffix(".none")
    if refused.is_file():
        return refused.read_bytes()[:_MAX_REASON_BYTES].decode("utf-8", "replace")
    if not blob.is_file():
        raise NotFound(
            "The pack's content is missing from the blob store.", code=ProblemCode.CONTENT_MISSING
        )
    return None


def _remember(refused: Path, why: str) -> None:
    with contextlib.suppress(OSError):  # not kept: asked again, made again
        refused.parent.mkdir(parents=True, exist_ok=True)
        refused.write_text(why[:_MAX_REASON_BYTES], encoding="utf-8")


def _none(why: str) -> NotFound:
    return NotFound(why, code=ProblemCode.NO_THUMBNAIL)
