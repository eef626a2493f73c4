"""The media types the edge serves (the platform's registry) and their upload limits."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from conclave.platform.errors import NotFound
from conclave.platform.media_types import MediaType
from conclave.platform.problem_types import ProblemCode


def media_type_or_404(value: str, known: Collection[str]) -> str:
    """``value`` if it names one of the ``known`` media types, else a 404 that lists them."""
    if value not in known:
        raise NotFound(
            f"Unknown media type {value[:64]!r}; use one of: {', '.join(known)}.",
            code=ProblemCode.UNKNOWN_MEDIA_TYPE,
            extra={"media_types": list(known)},
        )
    return value


def upload_limits(types: Mapping[str, MediaType], overrides: Mapping[str, int]) -> dict[str, int]:
    """The per-type limits with configured overrides applied (unknown names are refused)."""
    unknown = set(overrides) - set(types)
    if unknown:
        raise ValueError(f"EDGE_MAX_UPLOAD_BYTES names unknown media types: {sorted(unknown)}")
    return {name: media.max_upload_bytes for name, media in types.items()} | dict(overrides)
