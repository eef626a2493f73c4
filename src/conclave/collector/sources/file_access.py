"""Which files the ``file`` source may read, and opening them without a race.

The collector reads files on behalf of API callers, so a path is caller input naming something on
the service's own disk. The policy: only regular files inside the inbox
(``<CONCLAVE_DATA_DIR>/inbox``) or an extra root named in ``COLLECTOR_FILE_ROOTS``; no hidden
(dot) file or folder below a root; no ``..``, ``.``, empty part (``//``), control character or
lone surrogate anywhere; symlinks only when their target stays inside a root. Every refusal has
the same message, so the answers are no oracle for what exists outside the roots.

A path is checked twice: lexically when the expedition is requested (a 422, no disk access for
the caller's path), and against the disk when it runs, where the file is opened one component at
a time below the root with ``O_NOFOLLOW``: a symlink swapped in after the check is refused, not
followed.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from conclave.collector.sources.base import SourceError

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

REFUSED = (
    "path refused: the file source reads only existing regular files inside its inbox "
    "or COLLECTOR_FILE_ROOTS, named without '..', '//' or hidden ('.') parts"
)
MAX_PATH_CHARS = 4096
REFUSED_CODE = "FILE_REFUSED"

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO must not wait for a writer before fstat can refuse it.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class PathRefused(ValueError):
    """A path the ``file`` source will not read (at request time: a 422 ``FILE_REFUSED``)."""

    code = REFUSED_CODE

    def __init__(self) -> None:
        super().__init__(REFUSED)


class FileRefused(SourceError):
    """The run-time twin of :class:`PathRefused`: the expedition fails with ``FILE_REFUSED``."""

    code = REFUSED_CODE

    def __init__(self) -> None:
        super().__init__(REFUSED)


class FileTooLarge(SourceError):
    """The file is (or grew) larger than ``COLLECTOR_FILE_MAX_BYTES``."""

    code = "FILE_TOO_LARGE"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the file is larger than the file source's limit of {limit} bytes "
            "(COLLECTOR_FILE_MAX_BYTES)"
        )


def _plain_text(raw: str) -> bool:
    return not any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF for c in raw)


def _visible(parts: Sequence[str]) -> bool:
    """Non-empty parts, none empty or hidden (which also refuses '.' and '..')."""
    return bool(parts) and all(part and not part.startswith(".") for part in parts)


class FileRoots:
    """The folders the ``file`` source may read; the first one takes relative paths."""

    def __init__(self, roots: Sequence[Path]) -> None:
        if not roots:
            raise ValueError("the file source needs at least one root")
        # Both forms: a caller may name a file through the configured path of a root that is
        # itself a symlink (/data -> /mnt/data); the run-time check uses the real one.
        self._given = [Path(os.path.abspath(root)) for root in roots]
        self._inbox = self._given[0]

    def _real_roots(self) -> list[Path]:
        return [Path(os.path.realpath(root)) for root in self._given]

    def locate(self, raw: object) -> Path:
        """The absolute path ``raw`` names, checked without touching the disk
        (:class:`PathRefused` when the policy forbids it)."""
        if not isinstance(raw, str) or not 0 < len(raw) <= MAX_PATH_CHARS or not _plain_text(raw):
            raise PathRefused
        if not raw.startswith("/"):
            if not _visible(raw.split("/")):
                raise PathRefused
            return self._inbox / raw
        parts = raw[1:].split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise PathRefused
        candidate = Path(raw)
        for root in self._given + self._real_roots():
            if candidate.is_relative_to(root) and _visible(candidate.relative_to(root).parts):
                return candidate
        raise PathRefused

    def open(self, raw: object, max_bytes: int) -> io.TextIOWrapper:
        """Open the file ``raw`` names as UTF-8 text, reading at most ``max_bytes``
        (:class:`FileRefused` / :class:`FileTooLarge` otherwise)."""
        try:
            candidate = self.locate(raw)
        except PathRefused as exc:
            raise FileRefused from exc
        real = Path(os.path.realpath(candidate))
        for root in self._real_roots():
            if real.is_relative_to(root) and _visible(below := real.relative_to(root).parts):
                descriptor = _open_below(root, below)
                break
        else:
            raise FileRefused
        try:
            status = os.fstat(descriptor)
            if not stat.S_ISREG(status.st_mode):
                raise FileRefused
            if status.st_size > max_bytes:
                raise FileTooLarge(max_bytes)
            os.set_blocking(descriptor, True)
            reader = io.BufferedReader(_CappedReader(descriptor, max_bytes))
        except OSError as exc:
            os.close(descriptor)
            raise FileRefused from exc
        except BaseException:
            os.close(descriptor)
            raise
        return io.TextIOWrapper(reader, encoding="utf-8", newline="")


def _open_below(root: Path, parts: Sequence[str]) -> int:
    """A descriptor of ``root/parts...`` opened component by component, never through a
    symlink (the real path was resolved just before; a symlink now means a swap)."""
    try:
        folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise FileRefused from exc
    try:
        for part in parts[:-1]:
            inner = os.open(part, _DIRECTORY, dir_fd=folder)
            os.close(folder)
            folder = inner
        # Opening a device or socket may itself do something: look before opening it.
        if not stat.S_ISREG(os.stat(parts[-1], dir_fd=folder, follow_symlinks=False).st_mode):
            raise FileRefused
        return os.open(parts[-1], _FILE, dir_fd=folder)
    except OSError as exc:
        raise FileRefused from exc
    finally:
        os.close(folder)


class _CappedReader(io.RawIOBase):
    """Raw reads of a descriptor that fail once more than ``limit`` bytes came: the size
    checked at open time does not bound a file that is still growing."""

    def __init__(self, descriptor: int, limit: int) -> None:
        self._descriptor = descriptor
        self._limit = limit
        self._left = limit

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._descriptor

    def readinto(self, buffer: WriteableBuffer) -> int:
        count = os.readv(self._descriptor, [buffer])
        self._left -= count
        if self._left < 0:
            raise FileTooLarge(self._limit)
        return count

    def close(self) -> None:
        if not self.closed:
            os.close(self._descriptor)
        super().close()
