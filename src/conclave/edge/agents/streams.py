"""Which kinds of streams a container holds, read from its bytes: the route check for the
containers that carry audio, video or both (ISO base media / QuickTime / 3GPP, Ogg).

The sniffer only sees a candidate container; an MP4 brand or an Ogg page says nothing of what is
inside. These readers list the streams, and the agent refuses the file (415) when they contradict
its route: audio-only files belong on /audio, any video stream on /video.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any

from mutagen.ogg import OggPage
from mutagen.ogg import error as OggError
from pymediainfo import MediaInfo

from conclave.edge.agents.base import CorruptMedia

ISO_MEDIA = frozenset({"mp4", "quicktime", "3gpp", "3gpp2"})
"""Sniffed formats whose route is decided by their tracks."""

# An Ogg stream is named by the start of its first packet (each codec's identification header).
_OGG_CODECS: tuple[tuple[bytes, str, str], ...] = (
    (b"\x01vorbis", "vorbis", "audio"),
    (b"OpusHead", "opus", "audio"),
    (b"\x7fFLAC", "flac", "audio"),
    (b"fLaC", "flac", "audio"),
    (b"Speex   ", "speex", "audio"),
    (b"CELT    ", "celt", "audio"),
    (b"PCM     ", "pcm", "audio"),
    (b"\x01audio\x00\x00\x00", "ogm-audio", "audio"),
    (b"\x80theora", "theora", "video"),
    (b"\x80daala", "daala", "video"),
    (b"BBCD\x00", "dirac", "video"),
    (b"OVP80", "vp8", "video"),
    (b"\x01video\x00\x00\x00", "ogm-video", "video"),
    (b"YUV4MPEG", "yuv4mpeg", "video"),
    (b"fishead\x00", "skeleton", "other"),
    (b"\x80kate\x00\x00\x00", "kate", "other"),
    (b"\x01text\x00\x00\x00", "ogm-text", "other"),
)
# Every stream's first page comes before any other page (RFC 3533 §4); more than this many
# streams in one file is no real recording.
_MAX_OGG_STREAMS = 32
# Header pages of any real stream fit in a few hundred pages (a 16 MiB cover picture: 257).
_MAX_HEADER_PAGES = 4096
# A stream's last page is near the end of the file: other streams' pages interleave with it
# (video and audio, about a page each per second), so this holds several seconds of each.
_OGG_TAIL = 256 * 1024
_MAX_TAIL_PAGES = 1024


@dataclass(frozen=True)
class OggStream:
    """One logical stream of an Ogg file: its codec, kind and identification header."""

    codec: str
    kind: str  # "audio", "video" or "other"
    header: bytes
    serial: int


def ogg_streams(path: str) -> list[OggStream]:
    """The logical streams of an Ogg file, from the first (beginning-of-stream) page of each."""
    streams: list[OggStream] = []
    try:
        with open(path, "rb") as stream:
            while len(streams) < _MAX_OGG_STREAMS:
                page = OggPage(stream)  # type: ignore[no-untyped-call]
                if not page.first:
                    break
                header = page.packets[0][:64] if page.packets else b""
                codec, kind = next(
                    ((name, role) for magic, name, role in _OGG_CODECS if header.startswith(magic)),
                    ("unknown", "other"),
                )
                streams.append(OggStream(codec, kind, header, page.serial))
    except EOFError:
        pass  # a file of first pages only: what was read is all there is
    except (OggError, OSError, ValueError) as exc:
        raise CorruptMedia(f"The Ogg pages cannot be read: {type(exc).__name__}.") from exc
    if not streams:
        raise CorruptMedia("The Ogg file starts with no stream.")
    return streams


def ogg_header_bytes(path: str, limit: int) -> int:
    """Bytes of an Ogg file's header pages (identification, comments with any cover picture,
    codec setup): those before the first page that places audio or video in time. Counted page
    by page and no further than just past ``limit``."""
    try:
        with open(path, "rb") as stream:
            for _ in range(_MAX_HEADER_PAGES):
                page = OggPage(stream)  # type: ignore[no-untyped-call]
                if page.position > 0 or stream.tell() > limit:
                    return int(stream.tell())
            return limit + 1  # thousands of header pages: no encoder writes them, count it big
    except (EOFError, OggError, OSError, ValueError):
        return 0  # what could be read is small; the parser reports what is wrong with it


def ogg_last_granule(path: str, serial: int) -> int | None:
    """The granule position of the last page of stream ``serial`` found in the file's last
    :data:`_OGG_TAIL` bytes (a stream's time of its last frame or sample), or ``None``."""
    size = os.path.getsize(path)
    with open(path, "rb") as stream:
        stream.seek(max(0, size - _OGG_TAIL))
        tail = stream.read(_OGG_TAIL)
    pages = io.BytesIO(tail)
    at, tried = len(tail), 0
    while (at := tail.rfind(b"OggS", 0, at)) >= 0 and tried < _MAX_TAIL_PAGES:
        tried += 1
        pages.seek(at)
        try:
            page = OggPage(pages)  # type: ignore[no-untyped-call]
        except (EOFError, OggError, ValueError):
            continue  # "OggS" inside packet data, or a page cut off by the end of the file
        if page.serial == serial and page.position >= 0:
            return int(page.position)
    return None


def media_info(path: str) -> list[Any]:
    """MediaInfo's tracks of the file (a ``General`` track first)."""
    try:
        return list(MediaInfo.parse(path).tracks)
    except (OSError, RuntimeError, ValueError) as exc:
        raise CorruptMedia(f"The container cannot be read: {type(exc).__name__}.") from exc


_MAX_SECONDS = 10_000_000.0
"""About 116 days: no recording lasts longer; a larger figure comes from a crafted header (a
Theora frame rate of 1/2^32 and a last granule of 2^63 made 4e28 seconds)."""


def plausible_seconds(value: Any) -> float | None:
    """A duration a recording can have, else ``None`` (not a fact the bytes support)."""
    if isinstance(value, int | float) and 0 <= value <= _MAX_SECONDS:
        return float(value)
    return None


def kinds_of(tracks: list[Any]) -> set[str]:
    """``audio`` and/or ``video``: the kinds of MediaInfo's tracks (cover art is no track)."""
    return {t.track_type.lower() for t in tracks if t.track_type in ("Audio", "Video")}
