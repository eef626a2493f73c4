"""Thumbnails of image and landscape packs, made in a parser worker (never on the event loop).

A thumbnail is a WebP of at most :data:`THUMBNAIL_PIXELS` on its longer side: WebP because it
keeps an alpha channel (a PNG logo, a map with a transparent collar) at a fraction of PNG's size
and every browser the console supports shows it; lossy at quality 80, which is plenty for a
picture the size of a stamp. The first frame (or page) stands for an animation or a multi-page
TIFF; the EXIF orientation is applied, as a viewer would.

Decoding is bounded before it starts: a JPEG is decoded at the smallest scale libjpeg offers above
the thumbnail's size (``draft``); any other image is decoded whole, so one declaring more than
:data:`MAX_DECODED_PIXELS` pixels (Pillow's own default bomb limit) gets no thumbnail. TIFF layouts
Pillow has no mode for (16-bit RGB, 64-bit floats, many bands) are read with tifffile, from the
smallest overview when the file has one, and stretched to 8 bits between their lowest and highest
finite sample. The worker's address-space limit and time-out bound the rest.
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import tifffile
from PIL import Image, ImageOps

from conclave.edge.agents.base import CorruptMedia, error_text
from conclave.edge.agents.image import DECODE_FAILURES, OPENERS, open_checked, undecodable

THUMBNAIL_PIXELS = 256
"""Longest side of a thumbnail."""
MAX_DECODED_PIXELS = 89_478_485
"""Largest image decoded whole for a thumbnail (Pillow's default ``MAX_IMAGE_PIXELS``)."""
_QUALITY = 80


def make_thumbnail(path: str, fmt: str, target: str) -> tuple[str, Any]:
    """Write the thumbnail of the file at ``path`` (sniffed as ``fmt``) to ``target``, atomically:
    ``("ok", None)``, or ``("none", why)`` when the file cannot give one."""
    try:
        picture = _picture(path, fmt)
        _save(_displayable(picture), Path(target))
    except CorruptMedia as exc:
        return "none", error_text(exc)
    except MemoryError:
        return "none", "Making the thumbnail needed more memory than allowed."
    except Exception as exc:  # any crash on untrusted input: a file that gives no picture
        return "none", error_text(undecodable(exc))
    return "ok", None


def _picture(path: str, fmt: str) -> Image.Image:
    """The file's first image, at most :data:`THUMBNAIL_PIXELS` on its longer side."""
    if fmt == "tiff":
        try:
            return _shrunk(Image.open(path))
        except DECODE_FAILURES:
            return _tiff_picture(path)  # a layout Pillow has no mode for
    if fmt == "jpeg":
        open_checked(path, fmt).close()  # its scans counted, its data proven at 1/8 scale
        image = Image.open(path)
        # The smallest scale libjpeg decodes at that is still at least 256 px.
        image.draft("RGB", (THUMBNAIL_PIXELS, THUMBNAIL_PIXELS))
        return _shrunk(image)
    return _shrunk(_opened(path, fmt))


def _opened(path: str, fmt: str) -> Image.Image:
    image = OPENERS[fmt](path) if fmt in OPENERS else Image.open(path)
    _check_pixels(image.width, image.height)
    return image


def _check_pixels(width: int, height: int) -> None:
    if width * height > MAX_DECODED_PIXELS:
        raise CorruptMedia(
            f"The image has {width * height:,} pixels, more than a thumbnail is made from "
            f"({MAX_DECODED_PIXELS:,})."
        )


def _shrunk(image: Image.Image) -> Image.Image:
    if image.format != "JPEG":
        _check_pixels(image.width, image.height)
    image.seek(0)
    image = ImageOps.exif_transpose(image) or image
    if image.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        image = _eight_bit(np.asarray(image))
    image = _displayable(image)  # before resampling, which would drop a palette's transparency
    image.thumbnail((THUMBNAIL_PIXELS, THUMBNAIL_PIXELS), Image.Resampling.LANCZOS, reducing_gap=3)
    return image


def _tiff_picture(path: str) -> Image.Image:
    """A TIFF Pillow cannot open, read with tifffile: its smallest overview, else its first
    page, as 8-bit grey or RGB."""
    with tifffile.TiffFile(path) as tif:
        series = tif.series[0] if tif.series else None
        if series is None:
            raise CorruptMedia("The TIFF has no image.")
        level = series.levels[-1] if series.levels else series
        shape = level.shape
        if len(shape) < 2:
            raise CorruptMedia("The TIFF's image has no rows and columns.")
        if math.prod(shape) > MAX_DECODED_PIXELS * 4:
            raise CorruptMedia("The TIFF's image is larger than a thumbnail is made from.")
        samples = level.asarray()
    samples = np.squeeze(samples)
    if samples.ndim == 3 and samples.shape[0] <= 16 and samples.shape[-1] > 16:
        samples = np.moveaxis(samples, 0, -1)  # planar: bands first
    while samples.ndim > 3:
        samples = samples[0]  # the first of more frames or pages
    if samples.ndim == 3:
        bands = samples.shape[-1]
        samples = samples[..., :3] if bands >= 3 else samples[..., 0]
    image = _eight_bit(samples)
    image.thumbnail((THUMBNAIL_PIXELS, THUMBNAIL_PIXELS), Image.Resampling.LANCZOS)
    return image


def _eight_bit(samples: Any) -> Image.Image:
    """Samples of any numeric type stretched to 0-255 between their lowest and highest finite
    values (no-data and NaN samples black)."""
    values = np.asarray(samples, dtype=np.float64)
    finite = np.isfinite(values)
    if not finite.any():
        raise CorruptMedia("The image has no finite samples.")
    low, high = float(values[finite].min()), float(values[finite].max())
    span = high - low or 1.0
    scaled = np.where(finite, (values - low) * (255.0 / span), 0.0)
    return Image.fromarray(np.clip(scaled, 0, 255).astype(np.uint8))


def _displayable(image: Image.Image) -> Image.Image:
    """``image`` in a mode WebP stores: RGB, or RGBA when it has transparency."""
    if image.mode in ("RGB", "RGBA"):
        return image
    if image.mode in ("LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        return image.convert("RGBA")
    if image.mode == "CMYK":
        # Adobe's JPEGs store CMYK inverted; Pillow's conversion gives a fair preview either way.
        return image.convert("RGB")
    return image.convert("RGB")


def _save(image: Image.Image, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{uuid.uuid4().hex}.part")
    try:
        image.save(partial, "WEBP", quality=_QUALITY, method=4)
        os.replace(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
