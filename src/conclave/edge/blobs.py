"""Content-addressed blob store on a local or shared folder.

A blob is written to a temporary file while it streams in, hashed on the way (memory does not grow
with its size), and only moved under its SHA-256 name once the upload passed every check. Stored
blobs are read-only and never overwritten, so a modified blob stays detectable by re-hashing.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import logging
import os
import time
import uuid
from pathlib import Path

from conclave.edge.sniff import HEAD_BYTES
from conclave.platform.errors import PayloadTooLarge, Unavailable
from conclave.platform.problem_types import ProblemCode

log = logging.getLogger(__name__)

_CHUNK = 1024 * 1024
_WRITEBACK_BYTES = 32 * 1024 * 1024
"""With fsync on, the kernel is asked to start writing a part back every 32 MiB as it arrives:
the fsync before the pack commits then waits for the last few MiB instead of the whole file (one
fsync of a whole large upload was the large-file throughput target's shortfall)."""


class TempBlob:
    """A file part being received: written to disk, hashed and measured as it arrives."""

    def __init__(self, path: Path, max_bytes: int, *, write_back: bool = False) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.size = 0
        self.head = b""
        self._hash = hashlib.sha256()
        self._file = path.open("wb")
        self._write_back = write_back
        self._written_back = 0

    def write(self, data: bytes) -> None:
        """Append ``data``; 413 once the file passes its type's limit."""
        self.size += len(data)
        if self.size > self.max_bytes:
            raise PayloadTooLarge(
                f"A file exceeds this media type's limit of {self.max_bytes} bytes.",
                code=ProblemCode.PAYLOAD_TOO_LARGE,
                extra={"limit_bytes": self.max_bytes},
            )
        if len(self.head) < HEAD_BYTES:
            self.head += data[: HEAD_BYTES - len(self.head)]
        self._hash.update(data)
        self._file.write(data)
        if self._write_back and self.size - self._written_back >= _WRITEBACK_BYTES:
            self._start_write_back()

    def _start_write_back(self) -> None:
        # POSIX_FADV_DONTNEED makes Linux start writing the range's dirty pages back without
        # waiting for them (and drop the pages already clean): durable sooner, fsync cheaper.
        self._file.flush()
        length = self.size - self._written_back
        os.posix_fadvise(self._file.fileno(), self._written_back, length, os.POSIX_FADV_DONTNEED)
        self._written_back = self.size

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of everything written so far."""
        return self._hash.hexdigest()

    def close(self) -> None:
        """Close the file (idempotent)."""
        self._file.close()

    def discard(self) -> None:
        """Close and delete the temporary file."""
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def place_blob(source: Path, target: Path, *, fsync: bool) -> None:
    """Make the temporary file ``source`` the read-only blob ``target`` (its content address), or
    drop it when that content is stored already. Blocking: run in a thread, or in a parser
    worker (which stores a single-file upload's blob right after parsing it).

    With ``fsync``, the bytes reach the disk before the name, and the name (the folder's entry)
    before this returns: a power cut after the pack commits cannot leave its blob missing or
    empty."""
    if target.exists():
        # Same content is already stored; keep the original so tampering stays visible. Its name
        # may not be durable yet (another upload placing it right now): synced again here.
        source.unlink()
        if fsync:
            _fsync_folder(target.parent)
        return
    if fsync:
        with source.open("rb") as stream:
            os.fsync(stream.fileno())
    source.chmod(0o444)
    folder = target.parent  # root/sha256/ab/cd: made on first use
    levels = (folder.parent.parent, folder.parent, folder)
    created = [] if folder.is_dir() else [made for made in levels if not made.is_dir()]
    folder.mkdir(parents=True, exist_ok=True)
    os.replace(source, target)
    if fsync:
        # The new name, and the entries of the folders made for it, each in its parent folder.
        for changed in {folder, *(made.parent for made in created)}:
            _fsync_folder(changed)


def _fsync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    except OSError as error:
        # Some file systems (network, FUSE) cannot fsync a folder: they refuse with EINVAL or
        # EBADF, and keep their names durable their own way (PostgreSQL ignores the same two).
        if error.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(descriptor)


class BlobStore:
    """Blobs under ``root/sha256/ab/cd/<sha256>``; temporary parts under ``root/tmp``."""

    def __init__(self, root: Path, *, fsync: bool = True) -> None:
        self.root = root
        self._fsync = fsync
        self._tmp = root / "tmp"

    def open(self) -> None:
        """Create the folders and drop temporary files older than a day (crashed uploads)."""
        self._tmp.mkdir(parents=True, exist_ok=True)
        cutoff = time.time() - 86400
        for stale in self._tmp.glob("*.part"):
            with contextlib.suppress(OSError):
                if stale.stat().st_mtime < cutoff:
                    stale.unlink()

    def new_temp(self, max_bytes: int) -> TempBlob:
        """A temporary blob to stream one file part into."""
        return TempBlob(self._tmp / f"{uuid.uuid4().hex}.part", max_bytes, write_back=self._fsync)

    def path_for(self, sha256: str) -> Path:
        """Where the blob with this digest lives."""
        return self.root / "sha256" / sha256[:2] / sha256[2:4] / sha256

    @property
    def fsync(self) -> bool:
        """Whether a blob is made durable (its bytes and its name) before its pack commits."""
        return self._fsync

    async def store(self, temp: TempBlob) -> Path:
        """Move a verified temporary blob to its content address (once per content); 503
        ``STORE_UNAVAILABLE`` when the folder refuses it (full, read-only, not a folder)."""
        temp.close()
        target = self.path_for(temp.sha256)
        try:
            await asyncio.to_thread(place_blob, temp.path, target, fsync=self._fsync)
        except OSError as error:
            log.error("the blob store refused a file: %s: %s", type(error).__name__, error)
            raise Unavailable(
                "The blob store could not store the file; nothing was stored.",
                code=ProblemCode.STORE_UNAVAILABLE,
            ) from None
        return target

    async def digest(self, sha256: str) -> tuple[str, int] | None:
        """Re-hash a stored blob: its actual digest and size, ``None`` when it is missing."""
        return await asyncio.to_thread(self._digest, self.path_for(sha256))

    @staticmethod
    def _digest(path: Path) -> tuple[str, int] | None:
        try:
            with path.open("rb") as stream:
                digest = hashlib.file_digest(stream, "sha256")
                return digest.hexdigest(), stream.tell()
        except FileNotFoundError:
            return None

    def check(self) -> bool:
        """Whether the store's folder exists and accepts writes."""
        return self._tmp.is_dir() and os.access(self._tmp, os.W_OK)
