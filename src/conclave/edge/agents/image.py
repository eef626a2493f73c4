"""Image agent: format, dimensions, EXIF capture time, camera and GPS position (Pillow), and the
C2PA content credentials (:mod:`conclave.edge.agents.credentials`).

HEIF (phones) is read through pillow-heif, AVIF through Pillow's own plugin, and TIFF's structure
(frames, bands, sample type) through tifffile (:mod:`conclave.edge.agents.tiff`), which also
describes the TIFF layouts Pillow has no mode for.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pillow_heif
from PIL import AvifImagePlugin, ExifTags, Image, ImageFile, UnidentifiedImageError
from pillow_heif.as_plugin import HeifImageFile

from conclave.edge.agents.base import CorruptMedia, clean
from conclave.edge.agents.credentials import content_credentials
from conclave.edge.agents.gif_frames import count_frames
from conclave.edge.agents.jpeg_scans import count_scans
from conclave.edge.agents.png_chunks import PngLayout, png_layout
from conclave.edge.agents.tiff import TiffStructure, read_structure

_MAKE, _MODEL, _SOFTWARE, _ORIENTATION, _DATETIME = 271, 272, 305, 274, 306
_DATETIME_ORIGINAL, _DATETIME_DIGITIZED = 36867, 36868
_OFFSET, _OFFSET_ORIGINAL, _OFFSET_DIGITIZED = 36880, 36881, 36882

# Registered here, in the parser worker that imports the agents, never in the service process.
pillow_heif.register_heif_opener()

# Pillow's decompression-bomb check guards a full decode. This agent decodes JPEG at 1/8 scale,
# verifies PNG, GIF, WebP and BMP without decoding, never decodes TIFF, and decodes HEIF/AVIF only
# up to _FULL_DECODE_BYTES; the worker's address-space limit bounds the rest. At Pillow's default
# (179 Mpx refused) a 200 Mpx phone photo and any large map scan were refused as bombs.
Image.MAX_IMAGE_PIXELS = 1 << 30
_FULL_DECODE_BYTES = 192_000_000
"""HEIF/AVIF images whose decoded samples take up to this much (64 Mpx of 8-bit RGB, 48 Mpx with
alpha, 24 Mpx of 10-bit RGBA) are decoded in full to prove their data (a large camera HEIF takes
seconds: docs/benchmarks.md); larger ones are checked as far as their container is parsed on
opening. libheif and libavif peak at about three times this: 0.6 GB for 64 Mpx of 8-bit RGB, and
a 28 kB HEIF of 64 Mpx 10-bit RGBA took 1.3 GB before this bound counted bit depth and alpha."""


_BOMB_PIXELS = 64_000_000
_BOMB_PIXELS_PER_BYTE = 1024
"""Past 64 Mpx, an image declaring more than 1024 pixels per byte of file is a decompression
bomb (a 50 kB PNG of 20000 x 20000 zeros): it is refused, whatever the pixel limit above allows,
because whoever decodes the stored file downstream pays for every pixel. Real large images carry
far more bytes: a 200 Mpx phone JPEG about one per 10 pixels, a near-blank 1-bit scan about one
per 100."""


def _decoded_bytes(image: Image.Image) -> int:
    # pillow-heif states the bit depth (deeper samples are decoded to 16 bits before becoming 8);
    # Pillow's AVIF plugin does not.
    depth = image.info.get("bit_depth")
    sample = 2 if isinstance(depth, int) and depth > 8 else 1
    return image.width * image.height * len(image.getbands()) * sample


# Opened by the sniffed format: each plugin's own check accepts a short list of major brands
# (pillow-heif neither "miaf" nor a phone's "MiHE", and it claims an AVIF whose major brand is
# "mif1" although it has no AV1 decoder), while the files only need a compatible brand.
OPENERS: dict[str, Callable[[str], ImageFile.ImageFile]] = {
    "heif": HeifImageFile,
    "avif": AvifImagePlugin.AvifImageFile,
}

DECODE_FAILURES = (
    UnidentifiedImageError,
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    RuntimeError,  # pillow-heif's libheif errors
    Image.DecompressionBombError,
)
"""What Pillow and its plugins raise for a file they cannot decode."""


def _exif_time(value: Any) -> str | None:
    # EXIF writes "YYYY:MM:DD HH:MM:SS" in the camera's local time; keep it local, say so.
    # Cameras without a set clock write "0000:00:00 00:00:00"; editors write seconds of 70.
    text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    try:
        moment = datetime.strptime(text.strip().rstrip("\x00")[:19], "%Y:%m:%d %H:%M:%S")
    except ValueError:
        return None
    return moment.isoformat()


def _degrees(value: Any, ref: Any) -> float | None:
    try:
        degrees, minutes, seconds = (float(part) for part in value)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    result = degrees + minutes / 60 + seconds / 3600
    if not math.isfinite(result):
        return None  # a GPS block of 0/0 rationals: a phone that had no fix
    return -result if str(ref).upper().startswith(("S", "W")) else result


def gps_position(exif: Image.Exif) -> dict[str, Any] | None:
    """Latitude, longitude and altitude from the EXIF GPS IFD, when present and in range."""
    gps = exif.get_ifd(ExifTags.IFD.GPSInfo)
    if not gps or 2 not in gps or 4 not in gps:
        return None
    latitude = _degrees(gps.get(2), gps.get(1, "N"))
    longitude = _degrees(gps.get(4), gps.get(3, "E"))
    if latitude is None or longitude is None:
        return None
    if not (-90 <= latitude <= 90 and -180 <= longitude <= 180):
        return {"invalid": True}
    position: dict[str, Any] = {"latitude": round(latitude, 7), "longitude": round(longitude, 7)}
    if 6 in gps:
        try:
            altitude = float(gps[6])
            position["altitude_m"] = -altitude if gps.get(5) in (1, b"\x01") else altitude
        except (TypeError, ValueError, ZeroDivisionError):
            pass
    return position


def exif_summary(exif: Image.Exif) -> dict[str, Any]:
    """Capture time, camera and GPS position from an image's EXIF block."""
    if not exif:
        return {}
    details = exif.get_ifd(ExifTags.IFD.Exif)
    # The capture time is DateTimeOriginal, else DateTimeDigitized (the same moment for a digital
    # camera). DateTime is when the file was last changed (an editor's save), never the capture:
    # it is reported apart. Each offset (EXIF 2.31) belongs to the time it is written for.
    if details.get(_DATETIME_ORIGINAL):
        captured, offset = details[_DATETIME_ORIGINAL], details.get(_OFFSET_ORIGINAL)
    else:
        captured, offset = details.get(_DATETIME_DIGITIZED), details.get(_OFFSET_DIGITIZED)
    summary: dict[str, Any] = {
        "captured_at_local": _exif_time(captured or ""),
        "captured_utc_offset": offset if captured else None,
        "modified_at_local": _exif_time(exif.get(_DATETIME) or ""),
        "modified_utc_offset": details.get(_OFFSET) if exif.get(_DATETIME) else None,
        "camera_make": exif.get(_MAKE),
        "camera_model": exif.get(_MODEL),
        "software": exif.get(_SOFTWARE),
        "orientation": exif.get(_ORIENTATION),
        "gps": gps_position(exif),
    }
    return {key: value for key, value in summary.items() if value is not None}


def undecodable(exc: BaseException) -> CorruptMedia:
    """The refusal of an image its decoder failed on, in words an uploader can act on where
    Pillow's failure says what is wrong. Its own text is not repeated: it may quote the file's
    path on this server or the file's bytes."""
    text = str(exc) if isinstance(exc, OSError | SyntaxError) else ""
    if isinstance(exc, UnidentifiedImageError):  # an OSError naming the file: looked at first
        why = (
            "The image cannot be opened: its header, or a part before its image data, is "
            "damaged or out of range."
        )
    elif "truncated" in text.lower():  # "image file is truncated", "Truncated File Read"
        why = "The image file is truncated: it ends before its format says it does."
    elif text.startswith("broken PNG file"):
        why = "A chunk of the PNG is damaged: its checksum or its length does not match."
    else:
        why = f"The image cannot be decoded: {type(exc).__name__}."
    return CorruptMedia(why)


def open_checked(path: str, fmt: str) -> Image.Image:
    """Open an image and prove its data decodes, without decoding large images in full."""
    if fmt == "jpeg":
        # Before Pillow reads the headers: the scans bound what libjpeg's decode costs.
        with open(path, "rb") as stream:
            count_scans(stream)
    try:
        image = OPENERS[fmt](path) if fmt in OPENERS else Image.open(path)
    except DECODE_FAILURES as exc:
        raise undecodable(exc) from exc
    try:
        _refuse_bomb(image, path)
        if image.format == "JPEG":
            # Decoding at 1/8 scale walks the whole entropy-coded stream cheaply.
            image.draft("RGB", (max(1, image.width // 8), max(1, image.height // 8)))
            image.load()
        elif image.format in ("HEIF", "AVIF"):
            # Their "verify" checks nothing; decoding is the proof, within a budget.
            if _decoded_bytes(image) <= _FULL_DECODE_BYTES:
                image.load()
        else:
            with Image.open(path) as second:
                second.verify()
    except BaseException as exc:
        image.close()  # refused: its file is not left open for the collector to close
        if isinstance(exc, DECODE_FAILURES):
            raise undecodable(exc) from exc
        raise
    return image


def _refuse_bomb(image: Image.Image, path: str) -> None:
    pixels = image.width * image.height
    if pixels > _BOMB_PIXELS and pixels > _BOMB_PIXELS_PER_BYTE * os.path.getsize(path):
        raise CorruptMedia(
            f"The image declares {pixels:,} pixels in {os.path.getsize(path):,} bytes: "
            "a decompression bomb."
        )


def _png_frames(claimed: int, png: PngLayout | None) -> int:
    """The frames of a PNG whose ``acTL`` claims ``claimed``: no more than its ``fcTL`` chunks,
    as a player shows them (a 2-frame file claiming 2,147,483,648 was described so)."""
    if png is None or claimed <= 1:
        return claimed
    return max(1, min(claimed, png.frame_controls))


def _describe_plain_png(path: str, png: PngLayout) -> dict[str, Any] | None:
    """Facts of a PNG whose chunk layout needs no decoding, read from one opening that Pillow's
    ``verify`` then proves (every chunk's CRC): the general path opens the file a second time
    for ``verify``, which made up half of such a parse (docs/edge.md). ``None`` when Pillow
    does not take the file for a PNG (the general path then answers)."""
    try:
        with Image.open(path) as image:
            if image.format != "PNG":
                return None
            _refuse_bomb(image, path)
            facts: dict[str, Any] = {
                "format": image.format,
                "width": image.width,
                "height": image.height,
                "mode": image.mode,
                # An APNG's claim is read from its acTL chunk at opening: nothing is seeked.
                "frames": _png_frames(int(getattr(image, "n_frames", 1)), png),
            }
            # PngImageFile.getexif decodes the whole image to look past its data; the layout
            # says nothing is there, and the base class reads what the headers held.
            exif = _exif_or_nothing(lambda: Image.Image.getexif(image))
            image.verify()
    except DECODE_FAILURES as exc:
        raise undecodable(exc) from exc
    if exif:
        facts["exif"] = exif
    return facts


def _frames(image: Image.Image, path: str) -> tuple[int, bool]:
    """The image's frames, and whether that is a lower bound (a GIF's count is budgeted)."""
    if image.format == "GIF":
        # Pillow's count seeks to every frame, in Python per data sub-block: seconds for a
        # crafted 50 MiB file, minutes on the landscape route's 2 GiB.
        with open(path, "rb") as stream:
            found = count_frames(stream)
        return max(found.frames, 1), found.at_least
    try:
        return int(getattr(image, "n_frames", 1)), False
    except DECODE_FAILURES as exc:  # counting walks every frame's header
        raise CorruptMedia(f"The image's frames cannot be read: {type(exc).__name__}.") from exc


def _exif_or_nothing(read: Callable[[], Image.Exif]) -> dict[str, Any]:
    # A malformed EXIF block (cameras and editors write many) costs the EXIF facts, not the image.
    try:
        return exif_summary(read())
    except (*DECODE_FAILURES, KeyError, TypeError, IndexError, ZeroDivisionError, struct.error):
        return {}


def _tiff_exif(path: str) -> dict[str, Any]:
    """EXIF of a TIFF Pillow cannot open (no mode for its layout): its first directory read as
    an EXIF block (classic TIFF only: Pillow reads no BigTIFF header this way)."""
    with open(path, "rb") as stream:
        if stream.read(4) not in (b"II*\x00", b"MM\x00*"):
            return {}
        stream.seek(0)
        exif = Image.Exif()

        def read() -> Image.Exif:
            exif.load_from_fp(stream)
            return exif

        return _exif_or_nothing(read)


def describe_tiff(path: str, structure: TiffStructure) -> dict[str, Any]:
    """Facts of a TIFF from its directories (read by :func:`read_structure`), with Pillow's mode
    and EXIF when Pillow has a mode for the layout (none for 4-band 16-bit or 64-bit floats)."""
    facts: dict[str, Any] = {
        "format": "TIFF",
        "width": structure.width,
        "height": structure.height,
        "mode": None,
        "bands": structure.bands,
        "sample_type": structure.sample_type,
        "frames": structure.frames,
    }
    if structure.overviews:
        facts["overviews"] = structure.overviews
    if structure.masks:
        facts["masks"] = structure.masks
    try:
        with Image.open(path) as image:
            facts["mode"] = image.mode
            exif = _exif_or_nothing(image.getexif)
    except DECODE_FAILURES:
        exif = _tiff_exif(path)
    if exif:
        facts["exif"] = exif
    return facts


def describe_image(path: str, fmt: str, png: PngLayout | None = None) -> dict[str, Any]:
    """Technical facts of a raster image of the sniffed format ``fmt`` (``png``: the PNG's chunk
    layout, when read, which spares decoding it to look for EXIF that is not there)."""
    if fmt == "tiff":
        return describe_tiff(path, read_structure(path))
    if png is not None and not png.has_image_data:
        # Pillow opens it, then fails to verify it with an IndexError.
        raise CorruptMedia("The PNG holds no image data (no IDAT chunk).")
    if png is not None and not png.exif_needs_decoding:
        read_once = _describe_plain_png(path, png)
        if read_once is not None:
            return read_once
    with open_checked(path, fmt) as image:
        width, height = image.size
        if image.format == "JPEG":
            with Image.open(path) as original:
                width, height = original.size  # draft mode shrank the decoded copy
        frames, at_least = _frames(image, path)
        if image.format == "PNG":
            frames = _png_frames(frames, png)
        facts: dict[str, Any] = {
            "format": image.format,
            "width": width,
            "height": height,
            "mode": image.mode,
            "frames": frames,
        }
        if at_least:
            facts["frames_at_least"] = True  # the count stopped within its budget
        if png is not None and not png.exif_needs_decoding:
            # PngImageFile.getexif decodes the whole image to look past its data; the layout
            # says nothing is there, and the base class reads what the headers held.
            exif = _exif_or_nothing(lambda: Image.Image.getexif(image))
        else:
            exif = _exif_or_nothing(image.getexif)
        if exif:
            facts["exif"] = exif
    return facts


def credentials_of(
    path: str, facts: dict[str, Any], png: PngLayout | None = None
) -> dict[str, Any] | None:
    """The content credentials of an image described as ``facts``, unless its blocks are too
    many to read (:func:`content_credentials` gives the shapes). A PNG whose layout shows no
    manifest chunk and no XMP is answered without c2pa reading it."""
    if png is not None and not png.may_carry_credentials:
        return {"present": False}
    if facts.get("frames_at_least"):
        # c2pa reads a GIF block by block, each a call into Python: a GIF past the
        # frame walk's budget may hold millions of blocks, longer than the parse time-out.
        return {"checked": False, "reason": "The GIF has more blocks than are read."}
    return content_credentials(path)


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The image agent's summary."""
    png = png_layout(path) if fmt == "png" else None
    facts = describe_image(path, fmt, png)
    if (credentials := credentials_of(path, facts, png)) is not None:
        facts["content_credentials"] = credentials
    return clean(facts)
