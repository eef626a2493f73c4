"""Audio agent: duration, codec, sample rate, channels, bit rate (mutagen, MediaInfo fallback).

A container that can also carry video (ISO base media, Ogg) is on this route only when it holds
audio and no video: its streams are listed first and a video stream is a 415. A file shorter than
its header says (a cut-off recording or upload) reports the duration of the audio it holds, with
``truncated: true``.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import mutagen

from conclave.edge.agents import flac_frames
from conclave.edge.agents.base import CorruptMedia, MediaMismatch, clean
from conclave.edge.agents.streams import ISO_MEDIA, OggStream, kinds_of, media_info, ogg_streams

_CODECS = {
    "WAVE": "pcm",
    "MP3": "mp3",
    "FLAC": "flac",
    "OggVorbis": "vorbis",
    "OggOpus": "opus",
    "OggFLAC": "flac",
    "OggSpeex": "speex",
    "AIFF": "pcm",
}
_MUTAGEN_ERRORS = (mutagen.MutagenError, ValueError, EOFError, OSError, IndexError, KeyError)
# Opus always decodes at 48 kHz (RFC 7845 §5.1); OpusHead keeps the encoder's input rate apart.
_OPUS_RATE = 48_000
# Chunks before the sound data in a WAV or AIFF file (fmt, fact, LIST, bext, id3, JUNK, ...):
# more than this is no recording, and a crafted file cannot make the walk long.
_MAX_CHUNKS = 64
_TRACK_FACTS = ("duration_s", "sample_rate_hz", "channels")


def _with_mutagen(path: str) -> dict[str, Any] | None:
    audio = mutagen.File(path)
    if audio is None or audio.info is None:
        return None
    info = audio.info
    kind = type(audio).__name__
    codec = getattr(info, "codec", None) or _CODECS.get(kind, kind.lower())
    return {
        "container": kind,
        "codec": codec,
        "duration_s": round(float(getattr(info, "length", 0.0) or 0.0), 3),
        "sample_rate_hz": _OPUS_RATE if kind == "OggOpus" else getattr(info, "sample_rate", None),
        "channels": getattr(info, "channels", None),
        "bitrate_bps": getattr(info, "bitrate", None) or None,
        "bits_per_sample": getattr(info, "bits_per_sample", None),
        "tags": sorted(audio.tags.keys())[:50] if getattr(audio, "tags", None) else [],
    }


def _with_mediainfo(tracks: list[Any]) -> dict[str, Any] | None:
    general = next((t for t in tracks if t.track_type == "General"), None)
    audio = next((t for t in tracks if t.track_type == "Audio"), None)
    if audio is None:
        return None
    duration = audio.duration or (general.duration if general else None)
    return {
        "container": general.format if general else None,
        "codec": audio.format,
        "duration_s": round(float(duration) / 1000, 3) if duration else None,
        "sample_rate_hz": int(float(audio.sampling_rate)) if audio.sampling_rate else None,
        "channels": int(audio.channel_s) if str(audio.channel_s or "").isdigit() else None,
        "bitrate_bps": audio.bit_rate,
    }


def _route_check(path: str, fmt: str) -> tuple[list[Any] | None, list[OggStream]]:
    """Refuse (415) a container whose streams include video; MediaInfo's tracks of an ISO media
    file and the streams of an Ogg file, for what follows."""
    if fmt == "ogg":
        streams = ogg_streams(path)
        video = [s.codec for s in streams if s.kind == "video"]
        if video:
            raise MediaMismatch(f"The Ogg file holds video ({', '.join(video)}): use /video.")
        if not any(s.kind == "audio" for s in streams):
            raise CorruptMedia("The Ogg file holds no audio stream this route can read.")
        return None, streams
    if fmt in ISO_MEDIA:
        tracks = media_info(path)
        kinds = kinds_of(tracks)
        if "video" in kinds:
            raise MediaMismatch("The file holds a video track: use /video.")
        if "audio" not in kinds:
            raise CorruptMedia("No audio track was found in the file.")
        return tracks, []
    return None, []


def _sound_data(path: str) -> tuple[int, int] | None:
    """Offset and declared length of the sound data of a WAV (``data``) or AIFF (``SSND``) file,
    or ``None`` when the file ends before that chunk."""
    with open(path, "rb") as stream:
        head = stream.read(12)
        if head[:4] == b"RIFF":
            order, wanted, skip = "<", b"data", 0
        else:  # FORM/AIFF or AIFC; SSND data starts after its offset and block size fields
            order, wanted, skip = ">", b"SSND", 8
        offset = 12
        for _ in range(_MAX_CHUNKS):
            stream.seek(offset)
            header = stream.read(8)
            if len(header) < 8:
                return None
            kind, size = struct.unpack(order + "4sI", header)
            if kind == wanted:
                return offset + 8 + skip, max(0, size - skip)
            offset += 8 + size + (size & 1)
    return None


def _truncation(path: str, fmt: str, facts: dict[str, Any], tracks: list[Any] | None) -> None:
    """Mark a file that is shorter than its header says, with the duration it really holds."""
    duration = facts.get("duration_s") or 0.0
    if fmt in ("wav", "aiff"):
        available = os.path.getsize(path)
        data = _sound_data(path)
        declared = data[1] if data else None
        present = max(0, available - data[0]) if data else 0
        if declared is None or present < declared:
            share = present / declared if declared else 0.0
            facts["truncated"] = True
            facts["duration_s"] = round(duration * share, 3)
        else:
            facts["truncated"] = False
    elif fmt == "flac":
        played = flac_frames.samples_present(path)
        if played is not None:
            facts["truncated"] = played.truncated
            if played.truncated and facts.get("sample_rate_hz"):
                facts["duration_s"] = round(played.samples / facts["sample_rate_hz"], 3)
    elif tracks is not None:
        general = next((t for t in tracks if t.track_type == "General"), None)
        facts["truncated"] = bool(general is not None and general.istruncated == "Yes")


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The audio agent's summary."""
    tracks, streams = _route_check(path, fmt)
    try:
        facts = _with_mutagen(path)
    except _MUTAGEN_ERRORS as exc:
        # MediaInfo reads some files mutagen refuses (a streamed WAV without sizes, say).
        facts = _with_mediainfo(tracks if tracks is not None else media_info(path))
        if facts is None:
            raise CorruptMedia(f"The audio stream cannot be read: {type(exc).__name__}.") from exc
    if facts is None:
        facts = _with_mediainfo(tracks if tracks is not None else media_info(path))
    elif tracks is not None:
        # MediaInfo has read the tracks of an MP4/3GPP file; mutagen takes the movie header's
        # duration and the sample entry's channels, which phones' 3GPP files get wrong.
        read = _with_mediainfo(tracks) or {}
        facts |= {k: read[k] for k in _TRACK_FACTS if read.get(k) is not None}
    if facts is None:
        raise CorruptMedia("No audio stream was found in the file.")
    opus = next((s.header for s in streams if s.codec == "opus" and len(s.header) >= 16), None)
    if opus is not None:
        facts["input_sample_rate_hz"] = struct.unpack_from("<I", opus, 12)[0] or None
    _truncation(path, fmt, facts, tracks)
    return clean(facts)
