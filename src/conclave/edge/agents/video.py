"""Video agent: container, duration, resolution, frame rate and codecs (MediaInfo)."""

from __future__ import annotations

from typing import Any

from pymediainfo import MediaInfo

from conclave.edge.agents.base import CorruptMedia, clean


def _number(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The video agent's summary."""
    try:
        tracks = MediaInfo.parse(path).tracks
    except (OSError, RuntimeError, ValueError) as exc:
        raise CorruptMedia(f"The container cannot be read: {type(exc).__name__}.") from exc
    general = next((t for t in tracks if t.track_type == "General"), None)
    videos = [t for t in tracks if t.track_type == "Video"]
    audios = [t for t in tracks if t.track_type == "Audio"]
    if general is None or general.format is None or not videos:
        raise CorruptMedia("No video stream was found in the container.")
    first = videos[0]
    duration_ms = _number(general.duration) or _number(first.duration)
    return clean(
        {
            "container": general.format,
            "duration_s": round(duration_ms / 1000, 3) if duration_ms else None,
            "width": first.width,
            "height": first.height,
            "frame_rate": _number(first.frame_rate),
            "video_codecs": [t.format for t in videos],
            "audio_codecs": [t.format for t in audios],
            "bitrate_bps": general.overall_bit_rate,
            "encoded_at": general.encoded_date or general.tagged_date,
        }
    )
