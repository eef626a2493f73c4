"""Which agent handles which media type, and how a parser worker runs one."""

from __future__ import annotations

from typing import Any

from conclave.edge.agents import audio, cad, document, geo, image, landscape, video
from conclave.edge.agents.base import CorruptMedia, MediaMismatch
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


def agent_for(media_type: str) -> Extractor:
    """The agent of a built-in type, or the extractor a plug-in registered for its type."""
    agent = AGENTS.get(media_type) or registered_media_types()[media_type].extract
    if agent is None:
        raise LookupError(f"no agent for media type {media_type!r}")
    return agent


def run_agent(media_type: str, path: str, fmt: str, metadata: dict[str, Any]) -> tuple[str, Any]:
    """Run the agent of ``media_type``; the outcome is ``("ok", summary)``, ``("corrupt", why)``
    or ``("mismatch", why)``, plain data that crosses a process boundary."""
    try:
        return "ok", agent_for(media_type)(path, fmt, metadata)
    except MediaMismatch as exc:
        return "mismatch", str(exc)
    except CorruptMedia as exc:
        return "corrupt", str(exc)
    except MemoryError:
        return "corrupt", "Parsing the file needed more memory than allowed."
    except RecursionError:
        return "corrupt", "The file nests deeper than its parser allows."
    except Exception as exc:  # any crash on untrusted input: a bad file
        return "corrupt", f"The file cannot be parsed: {type(exc).__name__}."
