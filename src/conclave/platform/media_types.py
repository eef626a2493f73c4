"""The media types Conclave takes: the built-in ones and those plug-ins add.

This is the one list. The edge serves a route per type, the edge client and ``conclave edge``
accept exactly these, and the gateway's evidence tools offer them as an enum. A plug-in adds a
type without editing any of them: an installed distribution names a :class:`MediaType` (or an
iterable of them, or a callable returning either) under the ``conclave.media_types`` entry-point
group, e.g. in its ``pyproject.toml``::

    [project.entry-points."conclave.media_types"]
    spectra = "lab_plugin.media:SPECTRA"

A plug-in's type brings its own sniffer and extractor, which the edge runs as it runs its own;
the built-in types have theirs in the edge (``edge/sniff.py``, ``edge/agents/registry.py``), which
the platform may not import.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "conclave.media_types"
MiB = 1024**2
GiB = 1024**3

Sniffer = Callable[[bytes, int], tuple[str, str] | None]
"""``(head, size) -> (format, mime)`` of a file's first bytes, or ``None`` when they are not a
format of the type (the upload is then refused with 415)."""
Extractor = Callable[[str, str, dict[str, Any]], dict[str, Any]]
"""``(path, format, client metadata) -> extracted`` facts of a file; it runs in a parser worker
process and raises the edge's ``CorruptMedia`` or ``MediaMismatch`` for a bad file."""

# The store's column and the metrics labels hold the name; the URL path carries it unescaped.
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,15}\Z")


@dataclass(frozen=True)
class MediaType:
    """One media type: its name (the upload route, the client's TYPE) and its default per-file
    upload limit (``EDGE_MAX_UPLOAD_BYTES`` overrides it). ``sniff`` and ``extract`` are given
    by a plug-in's type; a built-in type's live in the edge."""

    name: str
    max_upload_bytes: int
    sniff: Sniffer | None = None
    extract: Extractor | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(
                f"media type name {self.name!r}: use 1-16 of a-z 0-9 _, starting with a letter"
            )
        if self.max_upload_bytes <= 0:
            raise ValueError(f"media type {self.name!r}: max_upload_bytes must be positive")


# Video and landscape (satellite scenes, large GeoTIFFs) are big by nature; everything else is
# sized for what a field device realistically sends.
BUILT_IN_MEDIA_TYPES = (
    MediaType("document", 100 * MiB),
    MediaType("image", 50 * MiB),
    MediaType("audio", 500 * MiB),
    MediaType("video", 4 * GiB),
    MediaType("cad", 200 * MiB),
    MediaType("landscape", 2 * GiB),
    MediaType("geo", 100 * MiB),
)


def _expand(target: Any, origin: str) -> Iterator[MediaType]:
    if callable(target) and not isinstance(target, MediaType):
        target = target()
    items = [target] if isinstance(target, MediaType) else target
    if not isinstance(items, Iterable):
        raise TypeError(
            f"{origin}: expected a MediaType, media types, or a callable returning them"
        )
    for item in items:
        if not isinstance(item, MediaType):
            raise TypeError(f"{origin}: {item!r} is not a conclave MediaType")
        if item.sniff is None or item.extract is None:
            raise TypeError(f"{origin}: media type {item.name!r} needs a sniffer and an extractor")
        yield item


def load_entry_point_media_types() -> list[MediaType]:
    """The media types the installed distributions register under ``conclave.media_types``. A
    plug-in that fails to load is logged and left out: one broken distribution must not take
    the services, the client and the CLI down with it."""
    found: list[MediaType] = []
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        origin = f"entry point {entry_point.name} ({entry_point.value})"
        try:
            found.extend(_expand(entry_point.load(), origin))
        except Exception as exc:
            log.error("media type plug-in not loaded: %s: %s", origin, exc)
    return found


@functools.cache
def _registered(search_path: tuple[str, ...]) -> Mapping[str, MediaType]:
    types = {media.name: media for media in BUILT_IN_MEDIA_TYPES}
    for media in load_entry_point_media_types():
        if media.name in types:
            # The first wins (a built-in before any plug-in): a type's route, its stored packs
            # and its extractor must not change with the order distributions are found in.
            log.error("media type plug-in not loaded: %r is registered twice", media.name)
            continue
        types[media.name] = media
    return MappingProxyType(types)


def registered_media_types() -> Mapping[str, MediaType]:
    """Every media type by name: the built-in ones first, then the plug-ins' in the order they
    are found. Plug-ins are looked up once per ``sys.path`` (scanning the installed distributions
    takes tens of milliseconds, and a client checks the type of every file it queues)."""
    return _registered(tuple(sys.path))


def media_type_names() -> tuple[str, ...]:
    """The names of :func:`registered_media_types`, in its order."""
    return tuple(registered_media_types())
