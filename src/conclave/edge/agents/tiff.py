"""TIFF structure read with tifffile: image directories, bands, sample type and GeoTIFF keys.

Pillow opens a TIFF through its first image directory and fails on layouts it has no mode for
(4-band 16-bit satellite scenes, 64-bit floats) and, when it counts frames, on a directory it
cannot read (the 1-bit mask of a Cloud-Optimized GeoTIFF). tifffile reads every layout's tags
without decoding a pixel, so a 2 GiB landscape is described in constant memory.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import numpy
import tifffile

from conclave.edge.agents.base import CorruptMedia

MAX_DIRECTORIES = 4096
"""Image directories read per file, beyond which the file is refused: a crafted chain of millions
of tiny directories (or a cycle longer than tifffile looks for) must not keep the worker busy."""

# tifffile logs every oddity of a malformed file as a warning; in a parser worker that is
# attacker-chosen text on stderr, and a refusal says what matters.
logging.getLogger("tifffile").setLevel(logging.CRITICAL)


@dataclass
class TiffStructure:
    """What the image directories of one TIFF say, pixels unread."""

    width: int
    height: int
    bands: int
    sample_type: str
    frames: int = 0
    overviews: int = 0
    masks: int = 0
    geo_keys: dict[str, Any] = field(default_factory=dict)
    """GeoKeyDirectory entries by tifffile's key names (``ProjectedCSTypeGeoKey``, …)."""
    pixel_scale: tuple[float, ...] = ()
    tiepoints: tuple[float, ...] = ()
    """The first tie point (raster i, j, k and model x, y, z)."""
    tiepoint_count: int = 0
    transformation: tuple[float, ...] = ()


def _page_data_inside(page: tifffile.TiffPage, size: int) -> bool:
    # Starts, not ends: writers overstate the last strip's byte count often enough that libtiff
    # and GDAL read on; an upload cut short leaves whole strips or tiles past the end.
    return all(
        offset < size
        for offset, count in zip(page.dataoffsets, page.databytecounts, strict=False)
        if count  # a sparse tile (offset and count 0) holds no data
    )


def _floats(page: tifffile.TiffPage, code: int, limit: int) -> tuple[float, ...]:
    value = page.tags.valueof(code)
    if value is None:
        return ()
    # tifffile gives one value as a scalar, a few as a tuple and more than 1024 as an ndarray.
    try:
        values = numpy.ravel(value)[:limit].astype(numpy.float64)
    except (TypeError, ValueError):
        return ()  # a tag of the wrong type: the image stands, its geo reference is unknown
    return tuple(float(v) for v in values)


def _read_georeference(page: tifffile.TiffPage, structure: TiffStructure) -> None:
    # The model tags are read raw: a TIFF may carry a tie point and scale without any GeoKeys.
    structure.pixel_scale = _floats(page, 33550, 3)
    structure.tiepoints = _floats(page, 33922, 6)  # further ground control points are counted
    if structure.tiepoints and (tag := page.tags.get(33922)) is not None:
        structure.tiepoint_count = int(tag.count) // 6
    structure.transformation = _floats(page, 34264, 16)
    if not page.is_geotiff:
        return
    try:
        keys = page.geotiff_tags or {}
    except (ValueError, TypeError, IndexError, KeyError):
        return  # a malformed key directory: the image stands, its CRS is unknown
    structure.geo_keys = {str(k): v for k, v in keys.items() if str(k).endswith("GeoKey")}


def read_structure(path: str) -> TiffStructure:
    """The first image's size and samples, the file's full-resolution images, overviews and
    masks, and the first image's GeoTIFF keys; ``CorruptMedia`` when the directories are
    unreadable or point past the end of the file (a truncated upload)."""
    size = os.path.getsize(path)
    try:
        with tifffile.TiffFile(path) as tif:
            first = tif.pages.first
            structure = TiffStructure(
                width=int(first.imagewidth),
                height=int(first.imagelength),
                bands=int(first.samplesperpixel),
                sample_type=str(first.dtype) if first.dtype is not None else "unknown",
            )
            _read_georeference(first, structure)
            seen: set[int] = set()
            for index, page in enumerate(tif.pages):
                if page.offset in seen:
                    break  # a chain looping back ends there (as Pillow and libtiff read it)
                seen.add(page.offset)
                if index >= MAX_DIRECTORIES:
                    raise CorruptMedia(
                        f"The TIFF has more than {MAX_DIRECTORIES} image directories."
                    )
                if not isinstance(page, tifffile.TiffPage):
                    continue
                if not _page_data_inside(page, size):
                    raise CorruptMedia("The TIFF's image data starts past the end of the file.")
                if page.is_mask:
                    structure.masks += 1
                elif page.is_reduced:
                    structure.overviews += 1
                else:
                    structure.frames += 1
    except CorruptMedia:
        raise
    except Exception as exc:  # tifffile raises many kinds on malformed directories
        raise CorruptMedia(f"The TIFF's directories cannot be read: {type(exc).__name__}.") from exc
    # Camera raws (NEF, DNG) open with a reduced preview and keep the full image in a SubIFD,
    # which is not in the main chain: the file still holds one picture.
    structure.frames = max(structure.frames, 1)
    if structure.width <= 0 or structure.height <= 0:
        raise CorruptMedia("The TIFF declares an empty image.")
    return structure
