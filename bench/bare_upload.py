"""The baselines of the edge benchmark: a bare Starlette endpoint that streams a multipart upload to
disk with ``python-multipart``'s streaming parser, and does nothing else (no hashing, no checks,
no parsing of the media, no database). With ``BENCH_FSYNC=1`` it makes each file durable before
it answers, as an upload service must: the file's bytes are fsynced (in a thread, off the event
loop) — the "bare fsync'd upload endpoint" issue 20 compares the edge's small uploads with.
Without it, nothing is fsynced.

Run by ``bench.edge`` as ``uvicorn bench.bare_upload:app``; files go to ``BENCH_UPLOAD_DIR``.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from pathlib import Path
from typing import BinaryIO

from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

UPLOAD_DIR = Path(os.environ.get("BENCH_UPLOAD_DIR") or tempfile.gettempdir())
FSYNC = os.environ.get("BENCH_FSYNC") == "1"


class _PartsToFiles:
    """Parser callbacks writing every part's data to a file of its own."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.unsynced: list[BinaryIO] = []
        self._file: BinaryIO | None = None

    def part_begin(self) -> None:
        name = uuid.uuid4().hex
        self.names.append(name)
        self._file = (UPLOAD_DIR / name).open("wb")

    def part_data(self, data: bytes, start: int, end: int) -> None:
        assert self._file is not None
        self._file.write(data[start:end])

    def part_end(self) -> None:
        assert self._file is not None
        if FSYNC:
            self._file.flush()
            self.unsynced.append(self._file)  # fsynced, then closed, by the endpoint
        else:
            self._file.close()


def _fsync_and_close(files: list[BinaryIO]) -> None:
    for file in files:
        os.fsync(file.fileno())
        file.close()


async def upload(request: Request) -> JSONResponse:
    _, options = parse_options_header(request.headers["content-type"])
    receiver = _PartsToFiles()
    parser = MultipartParser(
        options[b"boundary"],
        {
            "on_part_begin": receiver.part_begin,
            "on_part_data": receiver.part_data,
            "on_part_end": receiver.part_end,
        },
    )
    async for chunk in request.stream():
        parser.write(chunk)
    parser.finalize()
    if receiver.unsynced:
        await asyncio.to_thread(_fsync_and_close, receiver.unsynced)
    count = len(receiver.names)
    return JSONResponse(
        {"status": "created", "message": f"{count} files stored.", "evidence_ids": receiver.names}
    )


app = Starlette(routes=[Route("/upload", upload, methods=["POST"])])
