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
import itertools
import logging
import os
import time
import uuid
from pathlib import Path
from typing import BinaryIO

from conclave.edge.sniff import HEAD_BYTES
from conclave.platform.errors import PayloadTooLarge, Unavailable
from conclave.platform.problem_types import ProblemCode

log = logging.getLogger(__name__)

_CHUNK = 1024 * 1024
_WRITEBACK_BYTES = 32 * 1024 * 1024
"""With fsync on, the kernel is asked to start writing a part back every 32 MiB as it arrives:
the fsync before the pack commits then waits for the last few MiB instead of the whole file (one
fsync of a whole large upload was the large-file throughput target's shortfall)."""


SMALL_PART_BYTES = 128 * 1024
"""A file part up to this size is held in memory while it arrives, not written to a temporary
file: the parser worker writes a single such file straight into its blob's folder. Creating,
writing and deleting a temporary file was a fifth of the service's event loop for 64 KiB uploads,
and a rename across folders costs the kernel more than one within a folder (docs/edge.md). Below
the 208 KiB a local socket buffers by default: with little metadata the bytes are handed to a
worker without waiting for it, with the most (64 KiB) the send waits for the idle worker to read
the rest (under a millisecond measured)."""
MEMORY_PARTS_BYTES = 16 * 1024 * 1024
"""The most memory all the parts held in memory may take at once (128 parts of the largest
size); past it a part is written to a temporary file from its first byte, as larger ones are."""


class MemoryBudget:
    """Bytes the parts held in memory may still take; every part reserves the most it may hold."""

    def __init__(self, total: int) -> None:
        self.free = total

    def take(self, size: int) -> bool:
        if self.free < size:
            return False
        self.free -= size
        return True

    def give(self, size: int) -> None:
        self.free += size


class TempBlob:
    """A file part being received: hashed and measured as it arrives, and kept in memory while it
    is small (with a ``budget`` that granted it room), else written to a temporary file. A store
    that refuses the file (full, read-only, not a folder) is 503 ``STORE_UNAVAILABLE``."""

    def __init__(
        self,
        path: Path,
        max_bytes: int,
        *,
        write_back: bool = False,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.size = 0
        self.head = b""
        self._hash = hashlib.sha256()
        self._write_back = write_back
        self._written_back = 0
        self._budget = budget if budget is not None and budget.take(SMALL_PART_BYTES) else None
        self._buffer: bytearray | None = bytearray() if self._budget is not None else None
        self._file: BinaryIO | None = None
        self._on_disk = False
        if self._buffer is None:
            self._open()

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
        if self._buffer is not None and self.size <= SMALL_PART_BYTES:
            self._buffer += data
            return
        file = self._file or self._spill()
        try:
            file.write(data)
            if self._write_back and self.size - self._written_back >= _WRITEBACK_BYTES:
                self._start_write_back(file)
        except OSError as error:
            raise _unavailable(error) from None

    def _open(self) -> BinaryIO:
        try:
            self._file = self.path.open("wb")
        except OSError as error:
            raise _unavailable(error) from None
        self._on_disk = True
        return self._file

    def _spill(self) -> BinaryIO:
        """Move what is held in memory to the temporary file, and the part's room back."""
        file = self._open()
        if self._buffer is not None:
            try:
                file.write(self._buffer)
            except OSError as error:
                with contextlib.suppress(OSError):
                    file.close()  # closes the descriptor even when the flush fails
                raise _unavailable(error) from None
            self._buffer = None
        self._release()
        return file

    def _release(self) -> None:
        if self._budget is not None:
            self._budget.give(SMALL_PART_BYTES)
            self._budget = None

    def _start_write_back(self, file: BinaryIO) -> None:
        # POSIX_FADV_DONTNEED makes Linux start writing the range's dirty pages back without
        # waiting for them (and drop the pages already clean): durable sooner, fsync cheaper.
        file.flush()
        length = self.size - self._written_back
        os.posix_fadvise(file.fileno(), self._written_back, length, os.POSIX_FADV_DONTNEED)
        self._written_back = self.size

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of everything written so far."""
        return self._hash.hexdigest()

    @property
    def data(self) -> bytes | None:
        """The part's bytes while it is held in memory, else ``None`` (it is at ``path``)."""
        return bytes(self._buffer) if self._buffer is not None else None

    def on_disk(self) -> Path:
        """``path``, written from memory first if the part was held there, and closed."""
        if not self._on_disk:
            self._spill()
        self.close()
        return self.path

    def close(self) -> None:
        """Close the file (idempotent): its last bytes reach the page cache here."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError as error:
                raise _unavailable(error) from None

    def discard(self) -> None:
        """Close and delete the temporary file, and give back the part's room in memory. Never
        raises: it runs on every way out of an upload, whose answer (maybe its committed
        packs') must not turn into a 500 because a store turned read-only meanwhile; a file
        left behind goes with the next start's sweep."""
        with contextlib.suppress(Unavailable):
            self.close()
        self._buffer = None
        self._release()
        if self._on_disk:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            except OSError as error:
                log.warning(
                    "a temporary file could not be deleted: %s: %s", type(error).__name__, error
                )


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
    created = _missing_levels(folder)
    folder.mkdir(parents=True, exist_ok=True)
    os.replace(source, target)
    if fsync:
        # The new name, and the entries of the folders made for it, each in its parent folder.
        for changed in {folder, *(made.parent for made in created)}:
            _fsync_folder(changed)


def _missing_levels(folder: Path) -> list[Path]:
    """The levels of a blob folder (``sha256/ab/cd``) that do not exist yet."""
    if folder.is_dir():
        return []
    return [level for level in (folder.parent.parent, folder.parent, folder) if not level.is_dir()]


def write_beside(temp: Path, data: bytes, *, fsync: bool) -> None:
    """Write ``data`` to the new file ``temp``, which sits in the folder of the blob it is to
    become (:meth:`BlobStore.beside`), making the folders on the way; with ``fsync``, the names
    of the folders made are made durable here (rarely: once per folder), the file's own bytes
    and name by :func:`place_blob`. A rename within one folder costs the kernel less than one
    from another folder (docs/benchmarks.md)."""
    folder = temp.parent
    made = _missing_levels(folder)
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
    finally:
        os.close(descriptor)
    if fsync:
        for changed in {made_folder.parent for made_folder in made}:
            _fsync_folder(changed)


def _place_or_drop(source: Path, target: Path, fsync: bool) -> None:
    try:
        place_blob(source, target, fsync=fsync)
    except OSError:
        with contextlib.suppress(OSError):
            source.unlink()
        raise


def _unavailable(error: OSError) -> Unavailable:
    log.error("the blob store refused a file: %s: %s", type(error).__name__, error)
    return Unavailable(
        "The blob store could not store the file; nothing was stored.",
        code=ProblemCode.STORE_UNAVAILABLE,
    )


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
    """Blobs under ``root/sha256/ab/cd/<sha256>``; temporary parts under ``root/tmp``, or beside
    their blob (``.<id>.part``) while a parser worker writes and parses a small one."""

    def __init__(
        self, root: Path, *, fsync: bool = True, memory_bytes: int = MEMORY_PARTS_BYTES
    ) -> None:
        self.root = root
        self._fsync = fsync
        self._tmp = root / "tmp"
        self._memory = MemoryBudget(memory_bytes)

    def open(self) -> None:
        """Create the folders and drop temporary files older than a day (crashed uploads, and
        parser workers stopped while they wrote beside a blob). Blocking: it reads every blob
        folder (run in a thread)."""
        self._tmp.mkdir(parents=True, exist_ok=True)
        cutoff = time.time() - 86400
        for stale in itertools.chain(
            self._tmp.glob("*.part"), self.root.glob("sha256/*/*/.*.part")
        ):
            with contextlib.suppress(OSError):
                if stale.stat().st_mtime < cutoff:
                    stale.unlink()

    def new_temp(self, max_bytes: int) -> TempBlob:
        """A temporary blob to stream one file part into (held in memory while it is small and
        there is room)."""
        return TempBlob(
            self._tmp / f"{uuid.uuid4().hex}.part",
            max_bytes,
            write_back=self._fsync,
            budget=self._memory,
        )

    def beside(self, target: Path) -> Path:
        """A new temporary name in the folder of the blob ``target`` (see :func:`write_beside`)."""
        return target.parent / f".{uuid.uuid4().hex}.part"

    def path_for(self, sha256: str) -> Path:
        """Where the blob with this digest lives."""
        return self.root / "sha256" / sha256[:2] / sha256[2:4] / sha256

    @property
    def memory_free(self) -> int:
        """Bytes the parts held in memory may still take (:data:`MEMORY_PARTS_BYTES` when none
        is held)."""
        return self._memory.free

    @property
    def fsync(self) -> bool:
        """Whether a blob is made durable (its bytes and its name) before its pack commits."""
        return self._fsync

    async def store(self, temp: TempBlob) -> Path:
        """Move a verified temporary blob to its content address (once per content); 503
        ``STORE_UNAVAILABLE`` when the folder refuses it (full, read-only, not a folder)."""
        target = self.path_for(temp.sha256)
        await self.place(temp.on_disk(), target)
        return target

    async def place(self, source: Path, target: Path) -> None:
        """Make the file ``source`` the blob ``target`` (:func:`place_blob`, in a thread); 503
        ``STORE_UNAVAILABLE`` when the folder refuses it, and ``source`` is deleted then."""
        try:
            await asyncio.to_thread(_place_or_drop, source, target, self._fsync)
        except OSError as error:
            raise _unavailable(error) from None
        except asyncio.CancelledError:
            # Stopped before the thread ran it (a busy pool): nothing else deletes the file. A
            # placement already under way still ends whole, or meets the missing file and stops.
            with contextlib.suppress(OSError):
                os.unlink(source)
            raise

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
