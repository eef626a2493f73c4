"""Secret keys kept in files of their own (embedded mode): the transparency logs' signer keys and
the gateway's upstream credential key. One way to make, check and read such a file, so each
keeper's file gets the same protections.

A key file is this process's user's, mode 0600, in a folder others may not write (whoever may
write the folder could put a key of theirs, whose secret they keep, in place of ours). It is
written whole to a temporary file, fsync'd, then linked into place, which fails if another
process got there first: that process's key is read back, so two processes starting together
end with one key, and no process reads a half-written file. It is read through a descriptor that
does not follow a symlink, and checked on that descriptor: what is checked is what is read.
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from collections.abc import Callable
from pathlib import Path

MAX_KEY_FILE_BYTES = 4096


def key_file_bytes(path: Path, generate: Callable[[], str], error: type[Exception]) -> bytes:
    """What the key file at ``path`` holds (at most :data:`MAX_KEY_FILE_BYTES`), written with
    ``generate()`` first if there is none. ``error`` (called with a message naming the path) for
    a folder others may write, a file others may read, either of another user, or a symlink."""
    folder = path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    status = os.lstat(folder)  # mkdir's mode applies only to a folder it creates
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.geteuid() or status.st_mode & 0o022:
        raise error(f"{folder} must be a folder of this user that others may not write")
    if not os.path.lexists(path):
        _create(path, generate())
    return read_key_file(path, error)


def read_key_file(path: Path, error: type[Exception]) -> bytes:
    """The bytes of the existing key file ``path``, checked as :func:`key_file_bytes` does."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise error(f"{path} cannot be opened as a key file ({exc.strerror})") from None
    with os.fdopen(descriptor, "rb") as file:
        status = os.fstat(file.fileno())
        if (
            not stat.S_ISREG(status.st_mode)
            or status.st_mode & 0o077
            or status.st_uid != os.geteuid()
        ):
            raise error(f"{path} must be a file of this user that only it may read (mode 0600)")
        return file.read(MAX_KEY_FILE_BYTES)


def _create(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
