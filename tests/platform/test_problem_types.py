"""The problem-type registry: complete, documented, and one title per type."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from conclave.platform.errors import ConclaveError, NotFound, Unprocessable
from conclave.platform.problem_types import (
    PROBLEM_TYPES,
    TYPE_BASE,
    ProblemCode,
    title_of,
    type_uri,
)

ROOT = Path(__file__).resolve().parents[2]
# Codes of a failed expedition's `errors` (the expedition record), never an HTTP problem.
EXPEDITION_ERRORS = {"EXPEDITION_FAILED", "FILE_TOO_LARGE"}


@functools.cache
def _source_nodes() -> list[tuple[str, ast.AST]]:
    """Every AST node of the package's source but the registry's own, with its file."""
    return [
        (str(path.relative_to(ROOT)), node)
        for path in (ROOT / "src" / "conclave").rglob("*.py")
        if path.name != "problem_types.py"
        for node in ast.walk(ast.parse(path.read_text()))
    ]


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _given_code(node: ast.AST) -> ast.AST | None:
    """What ``node`` gives as a code: ``code=...`` in a call, or ``code = ...`` in a class."""
    if isinstance(node, ast.keyword) and node.arg == "code":
        return node.value
    if isinstance(node, ast.Assign) and any(
        isinstance(target, ast.Name) and target.id == "code" for target in node.targets
    ):
        return node.value
    return None


def test_registered_codes_are_raised_by_name() -> None:
    """A registered code is written ``ProblemCode.X`` (mypy checks the name), never as a string
    that a typo would turn into a new, unregistered code."""
    spelled = [
        (path, node.lineno, _text(node))
        for path, node in _source_nodes()
        if isinstance(node, ast.Constant) and _text(node) in PROBLEM_TYPES
    ]
    assert spelled == []


def test_codes_given_as_text_are_expedition_errors() -> None:
    """The only codes the source still gives as text (``code="X"``, ``code = "X"``) are an
    expedition record's error codes, never an HTTP problem; any other would be a problem nobody
    registered."""
    given = {_text(_given_code(node)) for _, node in _source_nodes()} - {None}
    assert given == EXPEDITION_ERRORS


def test_problem_code_is_its_registered_code() -> None:
    assert [member.value for member in ProblemCode] == list(PROBLEM_TYPES)
    assert all(member.name == member.value for member in ProblemCode)
    assert ProblemCode.EXPEDITION_NOT_FOUND == "EXPEDITION_NOT_FOUND"
    assert NotFound("x", code=ProblemCode.EXPEDITION_NOT_FOUND).code == "EXPEDITION_NOT_FOUND"


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
