"""The problem-type registry: complete, documented, and one title per type."""

from __future__ import annotations

import re
from pathlib import Path

from conclave.platform.errors import ConclaveError, NotFound, Unprocessable
from conclave.platform.problem_types import PROBLEM_TYPES, TYPE_BASE, title_of, type_uri

ROOT = Path(__file__).resolve().parents[2]
# A code given at a raise (``code="X"``) or as a class's code (``code = "X"``).
CODE_LITERAL = re.compile(r"""\bcode\s*=\s*"([A-Z][A-Z0-9_]+)\"""")


def test_every_code_the_source_raises_is_registered() -> None:
    """A new code without a registered title and meaning fails here, not in a user's client."""
    raised = {
        code
        for path in (ROOT / "src" / "conclave").rglob("*.py")
        if path.name != "problem_types.py"
        for code in CODE_LITERAL.findall(path.read_text())
    }
    assert raised, "the scan found no code at all"
    # Codes of a failed expedition's `errors` (the expedition record), never an HTTP problem.
    expedition_errors = {"EXPEDITION_FAILED", "FILE_TOO_LARGE"}
    assert raised - set(PROBLEM_TYPES) - expedition_errors == set()


def test_docs_list_every_registered_type() -> None:
    text = (ROOT / "docs" / "problems.md").read_text()
    rows = {
        match[0]: (match[1], match[2])
        for match in re.findall(r"^\| `([A-Z0-9_]+)` \| ([0-9, ]+) \| ([^|]+) \|", text, re.M)
    }
    expected = {
        code: (", ".join(map(str, kind.statuses)), kind.title)
        for code, kind in PROBLEM_TYPES.items()
    }
    assert {code: (status, title.strip()) for code, (status, title) in rows.items()} == expected


def test_types_are_distinct_and_stable() -> None:
    uris = [type_uri(code) for code in PROBLEM_TYPES]
    assert len(set(uris)) == len(uris)
    assert type_uri("VALIDATION_FAILED") == TYPE_BASE + "validation-failed"
    assert all(re.fullmatch(r"[A-Z][A-Z0-9_]*", code) for code in PROBLEM_TYPES)


def test_title_depends_on_the_code_only() -> None:
    assert NotFound("No expedition 'x'.", code="EXPEDITION_NOT_FOUND").title == (
        "Expedition not found"
    )
    assert Unprocessable("bad").title == Unprocessable("other").title == "Validation failed"
    # A code a plug-in tool makes up: its title is derived from the code, the same every time.
    assert title_of("QUOTA_EXCEEDED") == "Quota exceeded"
    assert ConclaveError("x", code="QUOTA_EXCEEDED").title == title_of("QUOTA_EXCEEDED")
