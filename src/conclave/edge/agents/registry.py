"""Which agent handles which media type, and how a parser worker runs one."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from conclave.edge.agents import audio, cad, document, geo, image, landscape, video
from conclave.edge.agents.base import CorruptMedia, MediaMismatch, clean, error_text
from conclave.edge.sniff import is_mime, sniff_plugin_file
from conclave.platform.media_types import Extractor, registered_media_types

AGENTS: dict[str, Extractor] = {
    "document": document.extract,
    "image": image.extract,
    "audio": audio.extract,
    "video": video.extract,
    "cad": cad.extract,
    "landscape": landscape.extract,
    "geo": geo.extract,
}
"""The agents of the built-in media types; a plug-in's type brings its own extractor."""


def run_plugin(media_type: str, path: str, metadata: dict[str, Any]) -> tuple[str, Any]:
    """Sniff and extract a file of a plug-in's type: ``("ok", {"facts", "format", "mime"})``
    with the facts cleaned as the built-in agents clean theirs, the sniffed format, and the
    extractor's ``mime`` when it gave a bare ``type/subtype`` (else the sniffed one);
    ``("unavailable", why)`` when this worker could not load the plug-in."""
    media = registered_media_types().get(media_type)
    if media is None or media.sniff is None or media.extract is None:
        return "unavailable", f"The parser of media type {media_type!r} could not be loaded."
    sniffed = sniff_plugin_file(media.sniff, path, os.path.getsize(path))
    if sniffed is None:
        return "mismatch", f"The file's content is not a format the {media_type} route accepts."
    summary = media.extract(path, sniffed.format, metadata)
    if not isinstance(summary, Mapping):
        return "corrupt", "The media type's extractor answered no facts."
    given = summary.get("mime")
    given = str.__str__(given) if isinstance(given, str) else None
    facts = clean({key: value for key, value in summary.items() if key != "mime"})
    mime = given if given is not None and is_mime(given) else sniffed.mime
    return "ok", {"facts": facts, "format": sniffed.format, "mime": mime}


def run_agent(media_type: str, path: str, fmt: str, metadata: dict[str, Any]) -> tuple[str, Any]:
    """Run the agent of ``media_type`` (for a plug-in's type, given no ``fmt``, its sniffer
    first, :func:`run_plugin`); the outcome is ``("ok", summary)``, ``("corrupt", why)`` or
    ``("mismatch", why)``, plain data that crosses a process boundary."""
    try:
        if media_type not in AGENTS:
            return run_plugin(media_type, path, metadata)
        return "ok", AGENTS[media_type](path, fmt, metadata)
    except MediaMismatch as exc:
        return "mismatch", error_text(exc)
    except CorruptMedia as exc:
        return "corrupt", error_text(exc)
    except MemoryError:
        return "corrupt", "Parsing the file needed more memory than allowed."
    except RecursionError:
        return "corrupt", "The file nests deeper than its parser allows."
    except Exception as exc:  # any crash on untrusted input: a bad file
        return "corrupt", f"The file cannot be parsed: {type(exc).__name__}."
