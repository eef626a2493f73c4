"""The collector's bus channels have one home: ``events.py`` declares them, the rest import them."""

from __future__ import annotations

import ast
from pathlib import Path

import conclave.collector

CHANNEL_PREFIX = "collector.expedition."


def _docstrings(tree: ast.Module) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _channels_spelled(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    prose = _docstrings(tree)
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and CHANNEL_PREFIX in node.value
        and id(node) not in prose
    ]


def test_only_events_py_spells_a_channel_name() -> None:
    root = Path(conclave.collector.__file__).parent
    spelled = {
        path.relative_to(root).as_posix(): found
        for path in sorted(root.rglob("*.py"))
        if (found := _channels_spelled(path))
    }
    assert list(spelled) == ["events.py"], spelled
