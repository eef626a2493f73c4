"""Audio agent: duration, codec, sample rate, channels, bit rate (mutagen, MediaInfo fallback).

A container that can also carry video (ISO base media, Ogg) is on this route only when it holds
audio and no video: its streams are listed first and a video stream is a 415. A file shorter than
its header says (a cut-off recording or upload) reports the duration of the audio it holds, with
``truncated: true``.
"""

from __future__ import annotations

import math
import os
import struct
from typing import Any

import mutagen

from conclave.edge.agents import flac_frames, iso_samples, mpeg_audio
from conclave.edge.agents.base import CorruptMedia, MediaMismatch, clean
from conclave.edge.agents.streams import (
    ISO_MEDIA,
    OggStream,
    kinds_of,
    media_info,
    ogg_header_bytes,
    ogg_streams,
    plausible_seconds,
)

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
_CONTAINERS = {
    "wav": "WAVE",
    "mpeg": "MP3",
    "flac": "FLAC",
    "ogg": "Ogg",
    "aiff": "AIFF",
    "amr": "AMR",
    "mp4": "MP4",
    "3gpp": "3GPP",
    "3gpp2": "3GPP2",
    "quicktime": "QuickTime",
    "matroska": "Matroska",
}
# MediaInfo's names where mutagen's differ (the rest: MediaInfo's, lower-case).
_MEDIAINFO_CODECS = {"MPEG Audio": "mp3", "AMR": "amr"}
_MUTAGEN_ERRORS = (mutagen.MutagenError, ValueError, EOFError, OSError, IndexError, KeyError)
# Opus always decodes at 48 kHz (RFC 7845 §5.1); OpusHead keeps the encoder's input rate apart.
_OPUS_RATE = 48_000
# Chunks before the sound data in a WAV or AIFF file (fmt, fact, LIST, bext, id3, JUNK, ...):
# more than this is no recording, and a crafted file cannot make the walk long.
_MAX_CHUNKS = 64
_TRACK_FACTS = ("duration_s", "sample_rate_hz", "channels")
_MAX_TAG_BYTES = 16 * 1024 * 1024


def _with_mutagen(path: str) -> dict[str, Any] | None:
    audio = mutagen.File(path)
    if audio is None or audio.info is None:
        return None
    info = audio.info
    kind = type(audio).__name__
    codec = getattr(info, "codec", None) or _CODECS.get(kind, kind.lower())
    return {
        # Where the first MPEG audio frame starts (after an ID3v2 tag): for the VBR header.
        "_frame_offset": getattr(info, "frame_offset", None),
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
    if "video" in kinds_of(tracks):
        # Whatever the head looked like (an ID3 tag put in front of a movie sniffs as MP3),
        # a file with a video track is not audio.
        raise MediaMismatch("The file holds a video track: use /video.")
    general = next((t for t in tracks if t.track_type == "General"), None)
    audio = next((t for t in tracks if t.track_type == "Audio"), None)
    if audio is None:
        return None
    duration = audio.duration or (general.duration if general else None)
    return {
        "container": general.format if general else None,
        "codec": _MEDIAINFO_CODECS.get(audio.format, str(audio.format or "").lower() or None),
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
        iso_samples.check_tables(path)  # before MediaInfo, which loops over declared counts
        tracks = media_info(path)
        kinds = kinds_of(tracks)
        if "video" in kinds:
            raise MediaMismatch("The file holds a video track: use /video.")
        if "audio" not in kinds:
            raise CorruptMedia("No audio track was found in the file.")
        return tracks, []
    return None, []


def _chunks(path: str) -> tuple[list[tuple[bytes, int, int]], bool]:
    """The top-level chunks of a WAV or AIFF file (id, data offset, declared data size, which may
    run past the end of a cut-off file), and whether the walk reached the end of the file."""
    found: list[tuple[bytes, int, int]] = []
    with open(path, "rb") as stream:
        order = "<" if stream.read(12)[:4] == b"RIFF" else ">"  # RIFF, or FORM (AIFF, AIFC)
        offset = 12
        for _ in range(_MAX_CHUNKS):
            stream.seek(offset)
            header = stream.read(8)
            if len(header) < 8:
                return found, True
            kind, size = struct.unpack(order + "4sI", header)
            found.append((kind, offset + 8, size))
            offset += 8 + size + (size & 1)
    return found, False


def _held_seconds(path: str) -> tuple[float, bool] | None:
    """Seconds of sound a WAV or AIFF file holds, from its own header (the byte rate of WAV's
    ``fmt``, AIFF's frame count and rate), and whether its sound data is cut off; ``None`` when
    the header does not say."""
    chunks, ended = _chunks(path)
    named = {kind: (offset, size) for kind, offset, size in reversed(chunks)}
    size = os.path.getsize(path)
    with open(path, "rb") as stream:
        if b"fmt " in named:
            stream.seek(named[b"fmt "][0])
            header = stream.read(16)
            if len(header) < 16:
                return None
            byte_rate = struct.unpack_from("<I", header, 8)[0]
            if b"data" not in named:
                return (0.0, True) if ended else None
            offset, declared = named[b"data"]
            present = min(declared, max(0, size - offset))
            if declared in (0, 0xFFFFFFFF):
                # A WAV written to a pipe (ffmpeg, arecord) cannot go back to fill its sizes in:
                # its data runs to the end of the file, nothing is missing.
                present, declared = max(0, size - offset), max(0, size - offset)
            return (present / byte_rate if byte_rate else 0.0), present < declared
        if b"COMM" in named:
            stream.seek(named[b"COMM"][0])
            header = stream.read(18)
            if len(header) < 18:
                return None
            frames = struct.unpack_from(">I", header, 2)[0]
            exponent, mantissa = struct.unpack_from(">HQ", header, 8)  # 80-bit extended rate
            try:
                rate = math.ldexp(mantissa, (exponent & 0x7FFF) - 16383 - 63)
                stated = frames / rate if rate > 0 else 0.0
            except (OverflowError, ZeroDivisionError):
                return None  # a rate no recording has: the header says nothing usable
            if b"SSND" not in named:
                return (0.0, True) if ended and frames else None
            offset, declared = named[b"SSND"]
            present = min(declared, max(0, size - offset))
            # Compressed AIFF-C has no fixed bytes per frame: the share of the bytes present.
            return (stated * present / declared if declared else 0.0), present < declared
    return None


def _tag_bytes(path: str, fmt: str) -> int:
    """How many bytes of tags mutagen would read whole: an ID3v2 tag at the start (MP3 and
    others), ID3 chunks of WAV and AIFF, FLAC's metadata blocks, an MP4's movie box, Ogg's
    header pages."""
    with open(path, "rb") as stream:
        head = stream.read(10)
        total = 0
        if head[:3] == b"ID3" and len(head) == 10:
            total += sum((byte & 0x7F) << (7 * (3 - i)) for i, byte in enumerate(head[6:10]))
        if fmt == "flac":
            stream.seek(4)
            for _ in range(_MAX_CHUNKS):
                header = stream.read(4)
                if len(header) < 4:
                    break
                size = int.from_bytes(header[1:4])
                total += size
                if header[0] & 0x80:
                    break
                stream.seek(size, os.SEEK_CUR)
        elif fmt in ISO_MEDIA:
            offset = 0
            for _ in range(_MAX_CHUNKS):
                stream.seek(offset)
                header = stream.read(16)
                if len(header) < 8:
                    break
                size, kind = struct.unpack_from(">I4s", header)
                if size == 1 and len(header) == 16:
                    size = struct.unpack_from(">Q", header, 8)[0]
                if kind == b"moov":
                    total += size
                if size < 8:
                    break
                offset += size
    if fmt in ("wav", "aiff"):
        total += sum(size for kind, _, size in _chunks(path)[0] if kind.lower().strip() == b"id3")
    elif fmt == "ogg":
        total += ogg_header_bytes(path, _MAX_TAG_BYTES)
    return total


def _truncation(path: str, fmt: str, facts: dict[str, Any], tracks: list[Any] | None) -> None:
    """Mark a file that is shorter than its header says, with the duration it really holds."""
    duration = facts.get("duration_s") or 0.0
    if fmt in ("wav", "aiff"):
        held = _held_seconds(path)
        if held is not None:
            # What the bytes hold, cut off or not: a streamed WAV's header states no real size.
            facts["truncated"] = held[1]
            facts["duration_s"] = round(held[0], 3)
    elif fmt == "flac":
        played = flac_frames.samples_present(path)
        if played is not None:
            facts["truncated"] = played.truncated
            if played.truncated and facts.get("sample_rate_hz"):
                facts["duration_s"] = round(played.samples / facts["sample_rate_hz"], 3)
    elif fmt == "mpeg" and isinstance(frame_offset := facts.get("_frame_offset"), int):
        read = mpeg_audio.held(path, frame_offset)
        facts["truncated"] = read is not None
        if read is not None:
            seconds = read.seconds if read.seconds is not None else duration * (read.share or 0)
            facts["duration_s"] = round(seconds, 3)
    elif tracks is not None:
        general = next((t for t in tracks if t.track_type == "General"), None)
        flagged = general is not None and general.istruncated == "Yes"
        plays = iso_samples.playable(path)
        facts["truncated"] = flagged or bool(plays and plays.truncated)
        if facts["truncated"] and plays is not None:
            facts["duration_s"] = round(plays.seconds, 3)


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The audio agent's summary."""
    tracks, streams = _route_check(path, fmt)
    try:
        # mutagen reads tags whole (a 200 MiB cover picture in an ID3 chunk took a worker to
        # 900 MB): past the cap the file is described by MediaInfo, without tag names.
        facts = _with_mutagen(path) if _tag_bytes(path, fmt) <= _MAX_TAG_BYTES else None
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
    # One name per container, whichever library read it (mutagen names its classes: OggVorbis).
    facts["container"] = _CONTAINERS.get(fmt, facts.get("container"))
    _truncation(path, fmt, facts, tracks)
    facts.pop("_frame_offset", None)
    facts["duration_s"] = plausible_seconds(facts.get("duration_s"))
    return clean(facts)
