"""Video agent: container, duration, resolution, frame rate and codecs (MediaInfo).

A container with no video stream is not a video: audio-only MP4/3GP/QuickTime, Ogg, FLV, ASF or
Matroska files are refused with 415 (the audio ones belong on /audio), a container with no
stream at all is 422. A file shorter than its container says (MP4 samples or a Matroska segment
past its end, MediaInfo's IsTruncated for the rest) has ``truncated: true``; an MP4/QuickTime/3GPP
one reports the time its whole samples play, the others their header's duration.
"""

from __future__ import annotations

import os
import struct
from typing import Any

from conclave.edge.agents import iso_samples
from conclave.edge.agents.base import CorruptMedia, MediaMismatch, clean
from conclave.edge.agents.credentials import content_credentials
from conclave.edge.agents.streams import (
    ISO_MEDIA,
    OggStream,
    media_info,
    ogg_last_granule,
    ogg_streams,
    plausible_seconds,
)


def _number(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _theora_seconds(path: str, stream: OggStream) -> float | None:
    """Duration of an Ogg Theora stream from its last page's granule position: the frame count
    (keyframe number shifted left, plus frames since it) over the frame rate, both in its
    identification header (Theora spec §6.2). Before bitstream 3.2.1 the position counts frames
    from 0, so one more frame is played than it says."""
    header = stream.header
    if len(header) < 42:
        return None
    numerator, denominator = (int(n) for n in struct.unpack_from(">II", header, 22))
    shift = (int.from_bytes(header[40:42]) >> 5) & 0x1F
    granule = ogg_last_granule(path, stream.serial)
    if granule is None or not numerator or not denominator:
        return None
    frames = (granule >> shift) + (granule & ((1 << shift) - 1))
    if tuple(header[7:10]) < (3, 2, 1):
        frames += 1
    return round(frames * denominator / numerator, 3)


def _ebml_number(data: bytes, at: int) -> tuple[int, int, bool] | None:
    """The EBML variable-size integer at ``at``: value, offset after it, and whether it is the
    reserved "unknown size" (all value bits set, as a recorder writes while it records)."""
    if at >= len(data) or not data[at]:
        return None
    length = 9 - data[at].bit_length()
    if at + length > len(data):
        return None
    value = int.from_bytes(data[at : at + length]) & ((1 << (7 * length)) - 1)
    return value, at + length, value == (1 << (7 * length)) - 1


def _matroska_cut_off(path: str, size: int) -> bool:
    """Whether the Matroska/WebM segment states more bytes than the file has after it."""
    with open(path, "rb") as stream:
        head = stream.read(64)
    header = _ebml_number(head, 4)  # the EBML header's size, after its 4-byte ID
    if header is None or header[1] + header[0] + 4 > len(head):
        return False
    at = header[1] + header[0]
    if head[at : at + 4] != b"\x18\x53\x80\x67":  # the Segment element
        return False
    segment = _ebml_number(head, at + 4)
    return segment is not None and not segment[2] and segment[1] + segment[0] > size


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The video agent's summary."""
    theora: OggStream | None = None
    if fmt == "ogg":
        streams = ogg_streams(path)
        if not any(s.kind == "video" for s in streams):
            if any(s.kind == "audio" for s in streams):
                raise MediaMismatch("The Ogg file holds only audio: use /audio.")
            raise CorruptMedia("The Ogg file holds no video stream this route can read.")
        theora = next((s for s in streams if s.codec == "theora"), None)
    if fmt in ISO_MEDIA:
        iso_samples.check_tables(path)  # before MediaInfo, which loops over declared counts
    tracks = media_info(path)
    general = next((t for t in tracks if t.track_type == "General"), None)
    videos = [t for t in tracks if t.track_type == "Video"]
    audios = [t for t in tracks if t.track_type == "Audio"]
    if not videos and audios:
        raise MediaMismatch("The file holds audio and no video stream: use /audio.")
    if general is None or general.format is None or not videos:
        raise CorruptMedia("No video stream was found in the container.")
    first = videos[0]
    duration_ms = _number(general.duration) or _number(first.duration)
    duration = round(duration_ms / 1000, 3) if duration_ms else None
    if theora is not None:
        # MediaInfo gives no duration for some Theora files and the audio's for others.
        duration = _theora_seconds(path, theora) or duration
    truncated = general.istruncated == "Yes"
    if fmt == "matroska":
        truncated = truncated or _matroska_cut_off(path, os.path.getsize(path))
    if fmt in ISO_MEDIA:
        # A cut-off movie: its sample tables say how far the bytes present play (MediaInfo
        # flags a media data box that runs past the end, not a file that lacks one).
        held = iso_samples.playable(path)
        truncated = truncated or bool(held and held.truncated)
        if truncated and held is not None:
            duration = round(held.seconds, 3)
    facts: dict[str, Any] = {
        "container": general.format,
        "duration_s": plausible_seconds(duration),
        "width": first.width,
        "height": first.height,
        "frame_rate": _number(first.frame_rate),
        "video_codecs": [t.format for t in videos],
        "audio_codecs": [t.format for t in audios],
        "bitrate_bps": general.overall_bit_rate,
        "encoded_at": general.encoded_date or general.tagged_date,
        "truncated": truncated,
    }
    if (credentials := content_credentials(path)) is not None:
        facts["content_credentials"] = credentials
    return clean(facts)
