"""The Restorer's one pass over an item: text trimmed at every level, keys made trimmed text,
nesting refused past 64 objects/arrays (before it could exhaust the stack)."""

from __future__ import annotations

from typing import Any

from conclave.collector.agents.restorer import MAX_DEPTH, Restorer


def _levels(count: int) -> dict[str, Any]:
    """An item ``count`` objects/arrays deep: the item, then arrays around a trimmable text."""
    inner: Any = "  deepest  "
    for _ in range(count - 1):
        inner = [inner]
    return {" id ": " k ", "v": inner}


def test_items_up_to_the_nesting_limit_are_trimmed_throughout() -> None:
    restored = Restorer("id").restore([_levels(MAX_DEPTH), _levels(MAX_DEPTH + 1)])
    assert restored.rejected == [f"item 1: nested deeper than {MAX_DEPTH} levels"]
    [record] = restored.records
    assert record.key == "k"
    value = record.data["v"]
    for _ in range(MAX_DEPTH - 1):
        [value] = value
    assert value == "deepest"


def test_keys_become_trimmed_text_and_other_values_stay() -> None:
    item = {1: " one ", " two ": {"n": 2.5, "t": (" kept ",), "b": None, "x": [" a ", True]}}
    [record] = Restorer(None).restore([item]).records
    assert record.data == {
        "1": "one",
        "two": {"n": 2.5, "t": (" kept ",), "b": None, "x": ["a", True]},
    }
