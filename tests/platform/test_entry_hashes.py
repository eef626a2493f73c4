"""A value's hash in a log entry is that of its canonical JSON as a JSON column keeps it, however
it is computed: entries already in a log must still verify."""

from __future__ import annotations

import enum
import hashlib
from typing import Any

import pytest

from conclave.platform.tlog.entries import canonical_json, json_sha256, stored_form


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


VALUES: list[Any] = [
    {"message": "hello"},
    [],
    None,
    "text",
    {"nested": {"list": [1, 2.5, True, None, "x"], "empty": {}}, "lone": "\ud800", "é": "ü"},
    {"nan": float("nan"), "inf": float("-inf"), "big": 2**70, "zero": -0.0},
    {2: "a", 10: "b"},  # kept with text keys, which sort the other way
    {"outer": {1: "int", "1": "text"}},  # two keys that are one once stored
    {"tuple": (1, 2), "subclasses": [Colour.RED, Level.HIGH]},
    {Colour.RED: "a str subclass as a key"},
    {"set": {3}},  # not JSON: written as its str
    {"many": list(range(500)), "keys": {str(i): i for i in range(200)}},
    [[[[[[[[[[{"deep": {2: "x"}}]]]]]]]]]],
    # A surrogate pair held as two code points: storing joins it into one character, which sorts
    # after U+E000 (outside attack), and may then equal another key.
    {"\ud800\udc00": 1, "\ue000": 2},
    {"\ud800\udc00": 1, "\U00010000": 2},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_a_values_hash_is_that_of_its_stored_forms_canonical_json(value: Any) -> None:
    expected = hashlib.sha256(canonical_json(stored_form(value))).hexdigest()
    assert json_sha256(value) == expected
