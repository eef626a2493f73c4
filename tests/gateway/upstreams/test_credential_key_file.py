"""The embedded credential key file, attacked: its folder and mode, and two processes starting
together (an outside review of users' upstream credentials, kept as regression tests; see
tests/gateway/upstreams/test_credential_attacks.py for the others)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conclave.gateway.upstreams.credentials import (
    CredentialKeyError,
    embedded_key,
    new_key_text,
    parse_keys,
)


def test_embedded_key_file_is_private_and_a_folder_others_may_write_is_refused(tmp_path: Path):
    """docs/security.md claimed the key is kept "in a folder of mode 0700"; the folder is
    ``CONCLAVE_DATA_DIR`` itself, which already exists, and nothing checked it. The claim is now
    the key file's own mode (0600, this user's) and a folder others may not write (they could
    put a key of theirs in place of ours); the data folder's mode is the operator's. (The
    attacker's test asserted the data folder was made 0700: the documentation changed instead.)
    """
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    key = embedded_key(data / "upstream-credential.key")
    assert (data / "upstream-credential.key").stat().st_mode & 0o777 == 0o600
    assert embedded_key(data / "upstream-credential.key").key_id == key.key_id
    assert [path.name for path in data.iterdir()] == ["upstream-credential.key"]

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(CredentialKeyError, match="others may not write"):
        embedded_key(shared / "upstream-credential.key")
    assert list(shared.iterdir()) == []


def test_embedded_key_processes_starting_together_end_with_one_key(tmp_path: Path):
    """ "created exclusively so two processes starting together end with one key": the first
    process created the file (O_EXCL) and wrote the key afterwards; a second one, getting
    FileExistsError in between, read the still-empty file and refused to start. Keys are now
    written whole and linked into place; a file found empty (written in place by a process of
    an earlier version) is read again until the key is there."""
    folder = tmp_path / "data"
    folder.mkdir(mode=0o700)
    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(lambda _: embedded_key(folder / "a.key").key_id, range(16)))
    assert len(ids) == 1

    path = folder / "b.key"
    # What a process of an earlier version leaves between os.open(O_EXCL) and its write.
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    written = new_key_text()
    writer = threading.Timer(0.3, lambda: path.write_text(written + "\n"))
    writer.start()
    try:
        assert embedded_key(path).key_id == parse_keys(written)[0].key_id
    finally:
        writer.join()
