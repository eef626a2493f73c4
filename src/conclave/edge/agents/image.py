"""Image agent: format, dimensions, EXIF capture time, camera and GPS position (Pillow), and the
C2PA content credentials (:mod:`conclave.edge.agents.credentials`)."""

from __future__ import annotations

from typing import Any

from PIL import ExifTags, Image, UnidentifiedImageError

from conclave.edge.agents.base import CorruptMedia, clean
from conclave.edge.agents.credentials import content_credentials

_MAKE, _MODEL, _SOFTWARE, _ORIENTATION, _DATETIME = 271, 272, 305, 274, 306
_DATETIME_ORIGINAL, _OFFSET_ORIGINAL = 36867, 36881


def _exif_time(value: Any) -> str | None:
    # EXIF writes "YYYY:MM:DD HH:MM:SS" in the camera's local time; keep it local, say so.
    text = str(value).strip().rstrip("\x00")
    if len(text) < 19 or text[4] != ":" or text[7] != ":":
        return None
    return f"{text[0:4]}-{text[5:7]}-{text[8:10]}T{text[11:19]}"


def _degrees(value: Any, ref: Any) -> float | None:
    try:
        degrees, minutes, seconds = (float(part) for part in value)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    result = degrees + minutes / 60 + seconds / 3600
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


def exif_summary(image: Image.Image) -> dict[str, Any]:
    """Capture time, camera and GPS position from the image's EXIF block."""
    exif = image.getexif()
    if not exif:
        return {}
    details = exif.get_ifd(ExifTags.IFD.Exif)
    captured = _exif_time(details.get(_DATETIME_ORIGINAL) or exif.get(_DATETIME) or "")
    summary: dict[str, Any] = {
        "captured_at_local": captured,
        "captured_utc_offset": details.get(_OFFSET_ORIGINAL),
        "camera_make": exif.get(_MAKE),
        "camera_model": exif.get(_MODEL),
        "software": exif.get(_SOFTWARE),
        "orientation": exif.get(_ORIENTATION),
        "gps": gps_position(exif),
    }
    return {key: value for key, value in summary.items() if value is not None}


def open_checked(path: str) -> Image.Image:
    """Open an image and prove its data decodes, without decoding large images in full."""
    try:
        image = Image.open(path)
        if image.format == "JPEG":
            # Decoding at 1/8 scale walks the whole entropy-coded stream cheaply.
            image.draft("RGB", (max(1, image.width // 8), max(1, image.height // 8)))
            image.load()
        else:
            Image.open(path).verify()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError,
            EOFError) as exc:  # fmt: skip
        raise CorruptMedia(f"The image cannot be decoded: {type(exc).__name__}.") from exc
    return image


def describe_image(path: str) -> dict[str, Any]:
    """Technical facts of a raster image."""
    with open_checked(path) as image:
        width, height = image.size
        if image.format == "JPEG":
            with Image.open(path) as original:
                width, height = original.size  # draft mode shrank the decoded copy
        facts: dict[str, Any] = {
            "format": image.format,
            "width": width,
            "height": height,
            "mode": image.mode,
            "frames": getattr(image, "n_frames", 1),
        }
        exif = exif_summary(image)
        if exif:
            facts["exif"] = exif
    return facts


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The image agent's summary."""
    facts = describe_image(path)
    if (credentials := content_credentials(path)) is not None:
        facts["content_credentials"] = credentials
    return clean(facts)
