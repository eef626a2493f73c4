"""A multipart/form-data body streamed from a file, with its length and SHA-256 known up front.

httpx's own encoder streams too, but a request signature covers the SHA-256 of the exact bytes
sent and must be in the headers, so the body has to be reproducible: a fixed boundary, fields
first, then the file read in chunks (twice when signing: once to hash, once to send).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

CHUNK_BYTES = 256 * 1024


def _quote(value: str) -> str:
    # The WHATWG form encoding: a name may not break out of its quotes or its header line.
    return value.replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


class MultipartFileBody:
    """``fields`` as text parts, then ``path`` as the ``file`` part."""

    def __init__(self, fields: dict[str, str], path: Path, filename: str | None = None) -> None:
        self.boundary = secrets.token_hex(16)
        self.path = path
        head = bytearray()
        for name, value in fields.items():
            head += f"--{self.boundary}\r\n".encode()
            head += f'Content-Disposition: form-data; name="{_quote(name)}"\r\n\r\n'.encode()
            head += value.encode() + b"\r\n"
        head += f"--{self.boundary}\r\n".encode()
        head += (
            'Content-Disposition: form-data; name="file"; '
            f'filename="{_quote(filename or path.name)}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        self._head = bytes(head)
        self._tail = f"\r\n--{self.boundary}--\r\n".encode()
        self._file_size = path.stat().st_size
        # The file's bytes as they went out: what the server stored, if it read them all.
        self._streamed = hashlib.sha256()
        self._streamed_bytes = -1

    @property
    def content_type(self) -> str:
        """The ``Content-Type`` header value."""
        return f"multipart/form-data; boundary={self.boundary}"

    @property
    def length(self) -> int:
        """The exact number of bytes :meth:`stream` yields (sent as ``Content-Length``)."""
        return len(self._head) + self._file_size + len(self._tail)

    def sha256(self) -> str:
        """Hex SHA-256 of the whole body, for the request signature."""
        digest = hashlib.sha256(self._head)
        for chunk in self._file_chunks():
            digest.update(chunk)
        digest.update(self._tail)
        return digest.hexdigest()

    @property
    def file_size(self) -> int:
        """The file's size in bytes, as sent (the file part's length)."""
        return self._file_size

    def streamed_sha256(self) -> str | None:
        """Hex SHA-256 of the file's bytes as :meth:`stream` sent them, or ``None`` unless the
        whole file went out (the log's entry of the pack must name exactly these bytes)."""
        if self._streamed_bytes != self._file_size:
            return None
        return self._streamed.hexdigest()

    def file_sha256(self) -> str:
        """Hex SHA-256 of the file as it is on disk now (read once more)."""
        digest = hashlib.sha256()
        for chunk in self._file_chunks():
            digest.update(chunk)
        return digest.hexdigest()

    async def stream(self) -> AsyncIterator[bytes]:
        """The body, chunk by chunk; memory does not grow with the file."""
        self._streamed, self._streamed_bytes = hashlib.sha256(), 0
        yield self._head
        # Plain reads of a local file: short and bounded, cheaper than a thread per chunk.
        for chunk in self._file_chunks():
            self._streamed.update(chunk)
            self._streamed_bytes += len(chunk)
            yield chunk
        yield self._tail

    def _file_chunks(self) -> Iterator[bytes]:
        sent = 0
        with self.path.open("rb") as handle:
            while sent < self._file_size:
                chunk = handle.read(min(CHUNK_BYTES, self._file_size - sent))
                if not chunk:
                    break
                sent += len(chunk)
                yield chunk
        if sent != self._file_size:
            # Content-Length is already on the wire: a file that shrank cannot be sent honestly.
            raise OSError(f"{self.path} changed size while being sent")
