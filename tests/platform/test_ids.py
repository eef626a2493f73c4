"""Random identifiers are well-formed version-4 UUIDs and do not repeat."""

from __future__ import annotations

import subprocess
import sys
import uuid

from conclave.platform.ids import new_id


def test_ids_are_version_4_uuids_in_canonical_text() -> None:
    ids = [new_id() for _ in range(5000)]
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text  # lower-case, hyphenated, 36 characters
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
    assert len(set(ids)) == len(ids)
    # every variant digit (8, 9, a, b) occurs: the two random bits under it are kept
    assert {text[19] for text in ids} == set("89ab")


# Run in a fresh interpreter: forking a process that has threads (pytest's may) is deprecated.
_FORKED_IDS = """
import os
from conclave.platform.ids import new_id

new_id()  # the parent holds read, unused random bytes when it forks
reading, writing = os.pipe()
child = os.fork()
if child == 0:  # the child: send its ids and leave at once
    os.write(writing, " ".join(new_id() for _ in range(50)).encode())
    os._exit(0)
os.close(writing)
with os.fdopen(reading) as pipe:
    childs = set(pipe.read().split())
os.waitpid(child, 0)
parents = {new_id() for _ in range(50)}
print(len(childs), len(parents & childs))
"""


def test_a_forked_child_never_hands_out_its_parents_ids() -> None:
    forked = subprocess.run(
        [sys.executable, "-c", _FORKED_IDS], capture_output=True, text=True, check=True
    )
    assert forked.stdout.split() == ["50", "0"]  # 50 ids from the child, none of them shared
