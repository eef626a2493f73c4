"""Audio agent: duration, codec, sample rate, channels, bit rate (mutagen, MediaInfo fallback)."""

from __future__ import annotations

from typing import Any

import mutagen
from pymediainfo import MediaInfo

from conclave.edge.agents.base import CorruptMedia, clean

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


def _with_mutagen(path: str) -> dict[str, Any] | None:
    try:
        audio = mutagen.File(path)
    except (mutagen.MutagenError, ValueError, EOFError, OSError, IndexError, KeyError) as exc:
        raise CorruptMedia(f"The audio stream cannot be read: {type(exc).__name__}.") from exc
    if audio is None or audio.info is None:
        return None
    info = audio.info
    kind = type(audio).__name__
    codec = getattr(info, "codec", None) or _CODECS.get(kind, kind.lower())
    return {
        "container": kind,
        "codec": codec,
        "duration_s": round(float(getattr(info, "length", 0.0) or 0.0), 3),
        "sample_rate_hz": getattr(info, "sample_rate", None),
        "channels": getattr(info, "channels", None),
        "bitrate_bps": getattr(info, "bitrate", None) or None,
        "bits_per_sample": getattr(info, "bits_per_sample", None),
        "tags": sorted(audio.tags.keys())[:50] if getattr(audio, "tags", None) else [],
    }


def _with_mediainfo(path: str) -> dict[str, Any] | None:
    tracks = MediaInfo.parse(path).tracks
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


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The audio agent's summary."""
    facts = _with_mutagen(path) or _with_mediainfo(path)
    if facts is None:
        raise CorruptMedia("No audio stream was found in the file.")
    return clean(facts)
