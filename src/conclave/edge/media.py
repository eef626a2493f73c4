"""The seven media types the edge accepts and their default upload limits."""

from __future__ import annotations

from collections.abc import Mapping

from conclave.platform.errors import NotFound

MiB = 1024**2
GiB = 1024**3

MEDIA_TYPES = ("document", "image", "audio", "video", "cad", "landscape", "geo")

# Per-file limits. Video and landscape (satellite scenes, large GeoTIFFs) are big by nature;
# everything else is sized for what a field device realistically sends.
DEFAULT_MAX_UPLOAD_BYTES: dict[str, int] = {
    "document": 100 * MiB,
    "image": 50 * MiB,
    "audio": 500 * MiB,
    "video": 4 * GiB,
    "cad": 200 * MiB,
    "landscape": 2 * GiB,
    "geo": 100 * MiB,
}


def media_type_or_404(value: str) -> str:
    """``value`` if it is one of the seven types, else a 404 that lists them."""
    if value not in MEDIA_TYPES:
        raise NotFound(
            f"Unknown media type {value[:64]!r}; use one of: {', '.join(MEDIA_TYPES)}.",
            code="UNKNOWN_MEDIA_TYPE",
            extra={"media_types": list(MEDIA_TYPES)},
        )
    return value


def upload_limits(overrides: Mapping[str, int]) -> dict[str, int]:
    """The per-type limits with configured overrides applied (unknown names are refused)."""
    unknown = set(overrides) - set(MEDIA_TYPES)
    if unknown:
        raise ValueError(f"EDGE_MAX_UPLOAD_BYTES names unknown media types: {sorted(unknown)}")
    return {**DEFAULT_MAX_UPLOAD_BYTES, **overrides}
