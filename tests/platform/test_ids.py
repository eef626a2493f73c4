"""Random identifiers are well-formed version-4 UUIDs and do not repeat."""

from __future__ import annotations

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
