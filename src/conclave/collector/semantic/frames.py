"""Messages between the collector and its semantic-memory process: length-prefixed pickles.

Pickle is safe here because both ends are this package, joined by the pipes of a child process
the collector started itself; nothing else can write to them.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, BinaryIO

_LENGTH = struct.Struct("!Q")


def encode(message: Any) -> bytes:
    """One frame: the pickled message after its length."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


def read_frame(stream: BinaryIO) -> Any:
    """The next message from a blocking stream; EOFError when the other end is gone."""
    header = _read_exactly(stream, _LENGTH.size)
    return pickle.loads(_read_exactly(stream, _LENGTH.unpack(header)[0]))


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    chunks = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


async def read_frame_async(reader: Any) -> Any:
    """The next message from an ``asyncio.StreamReader``."""
    header = await reader.readexactly(_LENGTH.size)
    return pickle.loads(await reader.readexactly(_LENGTH.unpack(header)[0]))
