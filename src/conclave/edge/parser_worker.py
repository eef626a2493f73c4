"""The parser worker process's side of :class:`conclave.edge.parsing.ParserPool`: its loop, the
jobs it runs on untrusted files, and how it answers (JSON, never a pickle)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any


def worker_main(connection: Connection, memory_bytes: int) -> None:
    # Imported here, in the worker only: the parsing libraries (Pillow, pypdf, ezdxf with numpy,
    # MediaInfo) stay out of the service process, which keeps its memory small.
    from conclave.edge.agents.registry import run_agent
    from conclave.edge.agents.thumbnail import make_thumbnail
    from conclave.platform.media_types import registered_media_types

    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    # Plug-in types load now, within the start-up deadline, not in the first upload's time.
    registered_media_types()
    connection.send_bytes(answer_bytes(("ready", None)))
    while True:
        try:
            job, arguments = connection.recv()
        except (EOFError, OSError):
            return
        if job == "thumbnail":
            outcome = make_thumbnail(*arguments)
        elif job == "parse bytes":
            outcome = _parsed_bytes(*arguments)
        else:
            media_type, path, fmt, metadata, placing = arguments
            outcome = run_agent(media_type, path, fmt, metadata)
            if placing is not None and outcome[0] == "ok":
                outcome = _placed(path, placing, outcome)
        connection.send_bytes(answer_bytes(outcome))


def _parsed_bytes(
    media_type: str, path: str, fmt: str, metadata: dict[str, Any], data: bytes, fsync: bool
) -> tuple[str, Any]:
    """A small file the service held in memory: written to ``path`` (beside its blob) and parsed
    there; deleted again unless the outcome is ``ok`` (the service then makes it the blob)."""
    from conclave.edge.agents.registry import run_agent
    from conclave.edge.blobs import write_beside

    try:
        write_beside(Path(path), data, fsync=fsync)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return "unstored", f"{type(exc).__name__}: {exc.strerror or exc}"
    outcome = run_agent(media_type, path, fmt, metadata)
    if outcome[0] != "ok":
        with contextlib.suppress(OSError):
            os.unlink(path)
    return outcome


def answer_bytes(outcome: tuple[str, Any]) -> bytes:
    """A worker's answer as the service reads it: JSON, never a pickle. A worker parses hostile
    files with native libraries; one taken over by such a file must not be able to make the
    service run code, which unpickling its answer would (a summary is plain data anyway: what
    the JSON column stores). A value JSON has no form for is written as its text."""
    return json.dumps(outcome, default=str).encode("ascii")


def _placed(path: str, placing: tuple[str, bool], outcome: tuple[str, Any]) -> tuple[str, Any]:
    """``outcome`` once the parsed file is its blob (``placing``: content address, fsync), or
    ``("unstored", why)`` when the blob store refused it."""
    from conclave.edge.blobs import place_blob

    target, fsync = placing
    try:
        place_blob(Path(path), Path(target), fsync=fsync)
    except OSError as exc:
        return "unstored", f"{type(exc).__name__}: {exc.strerror or exc}"
    return outcome
