"""Magic-byte sniffing: what a file really is, judged from its first bytes, never its name.

Binary formats have signatures; the text formats the edge takes (DXF, STEP/IFC, GeoJSON, GPX, KML)
do not, so they get small structural sniffers. A file must sniff as one of the formats its route
accepts, else the upload is refused with 415 before any parser sees it.
"""

from __future__ import annotations

import re
import struct
from typing import NamedTuple

from conclave.platform.errors import UnsupportedMediaType
from conclave.platform.media_types import Sniffer
from conclave.platform.problem_types import ProblemCode

HEAD_BYTES = 8192
"""How much of each file is kept in memory for sniffing."""


class Sniffed(NamedTuple):
    """The detected container format and its MIME type (a plug-in's sniffer returns the pair)."""

    format: str
    mime: str


# QuickTime files from cameras often have no `ftyp`: they start with another top-level box.
_QUICKTIME_FIRST_BOXES = {b"moov", b"mdat", b"wide", b"free", b"skip", b"pnot"}
_QUICKTIME_TOP_BOXES = _QUICKTIME_FIRST_BOXES | {b"ftyp", b"uuid", b"meta", b"PICT"}
_MOVIE_BOXES = {b"mvhd", b"cmov", b"trak", b"udta", b"meta", b"iods", b"prfl", b"clip"}
# HEIF (ISO/IEC 23008-12) and AVIF brands: still images (mif*, hei*, avif, miaf) and image
# sequences (msf1, hev*, avis). Cameras and phones put their own brand first (Canon `heix`, Apple
# lists `MiHE`/`MiHB` after `mif1`), so the compatible brands count too.
_HEVC_BRANDS = {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs"}
_HEIF_BRANDS = {b"mif1", b"mif2", b"miaf", b"msf1"} | _HEVC_BRANDS
_AVIF_BRANDS = {b"avif", b"avis", b"avio"}
_MAX_BRANDS = 64
# Any number of 999 comment pairs may precede the first SECTION (CAD exporters write their name,
# date and profile there); the head bounds how many are looked at.
_DXF_TEXT = re.compile(
    rb"^(?:\xef\xbb\xbf)?\s*(?:999[ \t]*\r?\n[^\n]*\n\s*)*0[ \t]*\r?\n\s*SECTION[ \t]*\r?\n"
)
_GEOJSON = re.compile(
    rb'"type"\s*:\s*"(?:FeatureCollection|Feature|Point|MultiPoint|LineString|MultiLineString|'
    rb'Polygon|MultiPolygon|GeometryCollection)"'
)
# A FeatureCollection may put "type" after its features, beyond the sniffed head: a JSON object
# whose head shows GeoJSON's own keys is taken too, and the geo agent refuses it (415) when the
# whole document turns out not to be GeoJSON.
_GEOJSON_KEYS = re.compile(rb'"(?:features|geometry|geometries|coordinates)"\s*:\s*[\[{]')


def _ftyp_brand(head: bytes) -> bytes | None:
    return head[8:12] if len(head) >= 12 and head[4:8] == b"ftyp" else None


def _ftyp_brands(head: bytes) -> set[bytes]:
    """Major and compatible brands of a leading ``ftyp`` box (as far as the head holds it)."""
    brand = _ftyp_brand(head)
    if brand is None:
        return set()
    end = min(struct.unpack_from(">I", head)[0], len(head), 16 + 4 * _MAX_BRANDS)
    return {brand} | {head[i : i + 4] for i in range(16, end - 3, 4)}


def _heif(head: bytes) -> Sniffed | None:
    brands = _ftyp_brands(head)
    if brands & _AVIF_BRANDS and (_ftyp_brand(head) in _AVIF_BRANDS or not brands & _HEVC_BRANDS):
        return Sniffed("avif", "image/avif")
    if brands & _HEIF_BRANDS:
        return Sniffed("heif", "image/heif")
    return None


def _box(head: bytes, offset: int) -> tuple[bytes, int, int] | None:
    """The type, header length and total size (0: to the end of the file) of the box at
    ``offset``, or ``None`` when the head holds no plausible box header there."""
    if offset + 8 > len(head):
        return None
    size, kind = struct.unpack_from(">I4s", head, offset)
    header = 8
    if size == 1:
        if offset + 16 > len(head):
            return None
        size, header = struct.unpack_from(">Q", head, offset + 8)[0], 16
    if (size != 0 and size < header) or not re.fullmatch(rb"[\x20-\x7e]{4}", kind):
        return None
    return kind, header, size


def _bare_quicktime(head: bytes) -> bool:
    """A QuickTime movie without `ftyp` (cameras write `moov`, `mdat` or `wide` first): the first
    box must be one a movie starts with, and what follows it must fit, so that four letters at
    offset 4 are not enough."""
    first = _box(head, 0)
    if first is None or first[0] not in _QUICKTIME_FIRST_BOXES:
        return False
    kind, header, size = first
    if kind == b"moov":
        child = _box(head, header)
        return child is not None and child[0] in _MOVIE_BOXES
    if size == 0 or size >= len(head):
        return kind == b"mdat"  # media data to the end, or past what the head holds
    following = _box(head, size)
    return following is not None and following[0] in _QUICKTIME_TOP_BOXES


def _iso_media(head: bytes, kind: str) -> Sniffed | None:
    """An ISO base media (MP4, QuickTime, 3GPP) file, a candidate for the audio or the video
    route: the agent reads its tracks and refuses it (415) where they contradict the route, so
    the brand (an M4A can hold video, an `mp42` only audio) does not decide."""
    brand = _ftyp_brand(head)
    if brand is None:
        return Sniffed("quicktime", f"{kind}/quicktime") if _bare_quicktime(head) else None
    if _heif(head) is not None:
        return None  # a HEIF or AVIF image (by any of its brands) belongs to the image routes
    if brand.startswith(b"3gp") or brand.startswith(b"3ge") or brand.startswith(b"3gg"):
        return Sniffed("3gpp", f"{kind}/3gpp")
    if brand.startswith(b"3g2") or brand == b"kddi":
        return Sniffed("3gpp2", f"{kind}/3gpp2")
    if brand == b"qt  ":
        return Sniffed("quicktime", f"{kind}/quicktime")
    return Sniffed("mp4", f"{kind}/mp4")


def _m2ts(head: bytes) -> bool:
    """MPEG-2 TS in 192-byte packets (a 4-byte timestamp before each 188-byte packet): Blu-ray
    and AVCHD cameras' `.m2ts`/`.mts`. Three sync bytes in a row, as for plain TS."""
    return len(head) > 388 and head[4] == 0x47 and head[196] == 0x47 and head[388] == 0x47


def _image(head: bytes) -> Sniffed | None:
    if head.startswith(b"\xff\xd8\xff"):
        return Sniffed("jpeg", "image/jpeg")
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return Sniffed("png", "image/png")
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return Sniffed("gif", "image/gif")
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return Sniffed("tiff", "image/tiff")
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return Sniffed("webp", "image/webp")
    if head.startswith(b"BM") and len(head) >= 26:
        return Sniffed("bmp", "image/bmp")
    return _heif(head)


def _landscape(head: bytes) -> Sniffed | None:
    if head.startswith(b"\x00\x00\x00\x0cjP  \r\n\x87\n") or head.startswith(b"\xffO\xffQ"):
        return Sniffed("jpeg2000", "image/jp2")
    return _image(head)


def _audio(head: bytes) -> Sniffed | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return Sniffed("wav", "audio/wav")
    if head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return Sniffed("mpeg", "audio/mpeg")
    if head.startswith(b"fLaC"):
        return Sniffed("flac", "audio/flac")
    if head.startswith(b"OggS"):
        return Sniffed("ogg", "audio/ogg")
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return Sniffed("aiff", "audio/aiff")
    if head.startswith(b"#!AMR"):
        return Sniffed("amr", "audio/amr")
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        # Matroska/WebM: a browser's MediaRecorder writes audio/webm. A candidate, as ISO media
        # is: the agent reads the tracks and sends a movie to /video (415).
        return Sniffed("matroska", "audio/webm" if b"webm" in head[:64] else "audio/x-matroska")
    return _iso_media(head, "audio")


def _video(head: bytes) -> Sniffed | None:
    iso = _iso_media(head, "video")
    if iso is not None:
        return iso
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return Sniffed("matroska", "video/webm" if b"webm" in head[:64] else "video/x-matroska")
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return Sniffed("avi", "video/x-msvideo")
    if head.startswith(b"FLV\x01"):
        return Sniffed("flv", "video/x-flv")
    if head.startswith(b"\x30\x26\xb2\x75\x8e\x66\xcf\x11"):
        return Sniffed("asf", "video/x-ms-asf")
    if head.startswith(b"\x00\x00\x01\xba"):
        return Sniffed("mpeg-ps", "video/mpeg")
    if len(head) > 376 and head[0] == 0x47 and head[188] == 0x47 and head[376] == 0x47:
        return Sniffed("mpeg-ts", "video/mp2t")
    if _m2ts(head):
        return Sniffed("m2ts", "video/mp2t")
    if head.startswith(b"OggS"):
        return Sniffed("ogg", "video/ogg")
    return None


def _text(head: bytes) -> str | None:
    """The head decoded as UTF-8 (BOM allowed), or ``None`` when it is binary."""
    if b"\x00" in head:
        return None
    data = head.removeprefix(b"\xef\xbb\xbf")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # The head may end in the middle of a multi-byte character.
        if exc.start < len(data) - 4:
            return None
        return data[: exc.start].decode("utf-8")


def _document(head: bytes) -> Sniffed | None:
    if head.startswith(b"%PDF-"):
        return Sniffed("pdf", "application/pdf")
    if head.startswith(b"PK\x03\x04"):
        return Sniffed("zip", "application/zip")  # Office Open XML / ODF: the agent looks inside
    if head.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        return Sniffed("ole", "application/x-ole-storage")
    if head.startswith(b"{\\rtf"):
        return Sniffed("rtf", "application/rtf")
    text = _text(head)
    if text is None:
        return None
    lowered = text.lstrip()[:256].lower()
    if lowered.startswith(("<!doctype html", "<html")):
        return Sniffed("html", "text/html")
    if lowered.startswith("<?xml"):
        return Sniffed("xml", "application/xml")
    return Sniffed("text", "text/plain")


def _cad(head: bytes, size: int) -> Sniffed | None:
    if head.startswith(b"AutoCAD Binary DXF"):
        return Sniffed("dxf", "image/vnd.dxf")
    if re.match(rb"AC10\d\d", head[:6]):
        return Sniffed("dwg", "image/vnd.dwg")
    if head.startswith(b"ISO-10303-21;"):
        if re.search(rb"FILE_SCHEMA\s*\(\s*\(\s*'IFC", head):
            return Sniffed("ifc", "application/x-step")
        return Sniffed("step", "model/step")
    if len(head) >= 84 and size == 84 + 50 * struct.unpack_from("<I", head, 80)[0]:
        return Sniffed("stl", "model/stl")
    if _DXF_TEXT.match(head):
        return Sniffed("dxf", "image/vnd.dxf")
    if head.lstrip().startswith(b"solid") and b"facet" in head:
        return Sniffed("stl", "model/stl")
    return None


def _geo(head: bytes) -> Sniffed | None:
    if head.startswith(b"PK\x03\x04"):
        return Sniffed("kmz", "application/vnd.google-earth.kmz")  # the agent finds the KML
    text = _text(head)
    if text is None:
        return None
    stripped = text.lstrip()
    if stripped.startswith("{") and (_GEOJSON.search(head) or _GEOJSON_KEYS.search(head)):
        return Sniffed("geojson", "application/geo+json")
    if stripped.startswith("<"):
        if re.search(r"<(?:\w+:)?gpx[\s>]", text):
            return Sniffed("gpx", "application/gpx+xml")
        if re.search(r"<(?:\w+:)?kml[\s>]", text):
            return Sniffed("kml", "application/vnd.google-earth.kml+xml")
    return None


SNIFFERS: dict[str, Sniffer] = {
    "document": lambda head, _size: _document(head),
    "image": lambda head, _size: _image(head),
    "audio": lambda head, _size: _audio(head),
    "video": lambda head, _size: _video(head),
    "cad": _cad,
    "landscape": lambda head, _size: _landscape(head),
    "geo": lambda head, _size: _geo(head),
}
"""The sniffers of the built-in media types; a plug-in's type brings its own."""


def is_built_in(media_type: str) -> bool:
    """Whether ``media_type`` is sniffed here, in the service (a plug-in's type is sniffed in a
    parser worker: its sniffer is code the edge does not know the cost of)."""
    return media_type in SNIFFERS


def sniff(media_type: str, head: bytes, size: int) -> Sniffed:
    """The format of a file posted to a built-in ``media_type``; 415 when its bytes are not one."""
    found = SNIFFERS[media_type](head, size)
    if found is None:
        raise UnsupportedMediaType(
            f"The file's content is not a format the {media_type} route accepts.",
            code=ProblemCode.UNSUPPORTED_MEDIA_TYPE,
        )
    return Sniffed(*found)


# What a plug-in may answer: a format name and a MIME type the pack, the event and the
# Content-Type of GET .../content carry as they are.
_FORMAT = re.compile(r"[A-Za-z0-9._+-]{1,32}")
_MIME = re.compile(r"[A-Za-z0-9!#$&^_.+-]{1,64}/[A-Za-z0-9!#$&^_.+-]{1,64}")


def is_mime(value: object) -> bool:
    """Whether ``value`` is a bare ``type/subtype`` (no parameters, no whitespace)."""
    return isinstance(value, str) and _MIME.fullmatch(value) is not None


def sniff_plugin_file(sniffer: Sniffer, path: str, size: int) -> Sniffed | None:
    """A plug-in sniffer's reading of the file at ``path`` (run in a parser worker), ``None``
    when it does not recognise the bytes; ``ValueError`` when its answer is not a format name
    and a MIME type."""
    with open(path, "rb") as handle:
        head = handle.read(HEAD_BYTES)
    found = sniffer(head, size)
    if found is None:
        return None
    if (
        not isinstance(found, tuple)
        or len(found) != 2
        or not all(isinstance(part, str) for part in found)
    ):
        raise ValueError("the media type's sniffer answered something else than (format, mime)")
    # Plain strings: a subclass's own methods are not trusted, nor pickled back.
    fmt, mime = (str.__str__(part) for part in found)
    if _FORMAT.fullmatch(fmt) is None or not is_mime(mime):
        raise ValueError("the media type's sniffer answered something else than (format, mime)")
    return Sniffed(fmt, mime)
