"""Which agent handles which media type, and how a parser worker runs one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conclave.edge.agents import audio, cad, document, geo, image, landscape, video
from conclave.edge.agents.base import CorruptMedia, MediaMismatch

Agent = Callable[[str, str, dict[str, Any]], dict[str, Any]]

AGENTS: dict[str, Agent] = {
    "document": document.extract,
    "image": image.extract,
    "audio": audio.extract,
    "video": video.extract,
    "cad": cad.extract,
    "landscape": landscape.extract,
    "geo": geo.extract,
}


def run_agent(media_type: str, path: str, fmt: str, metadata: dict[str, Any]) -> tuple[str, Any]:
    """Run the agent of ``media_type``; the outcome is ``("ok", summary)``, ``("corrupt", why)``
    or ``("mismatch", why)``, plain data that crosses a process boundary."""
    try:
        return "ok", AGENTS[media_type](path, fmt, metadata)
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
