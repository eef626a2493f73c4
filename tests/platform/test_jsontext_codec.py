"""The reusable JSON encoder and decoder write and read exactly what ``json.dumps`` and
``json.loads`` do: content hashes and stored texts depend on it byte for byte."""

from __future__ import annotations

import enum
import json
import time
from collections import OrderedDict
from typing import Any

import pytest

from conclave.platform.jsontext import json_decoder, json_encoder


class Level(enum.IntEnum):
    HIGH = 3


class Label(str):
    pass


DOCUMENTS: list[Any] = [
    {"b": 1, "a": [1.5, -0.0, 1e16, 1e-7, 5e-324, 1.7976931348623157e308, 0.1]},
    {"text": "naïve ☃ 𝄞 \u2028 \x7f", "controls": "\x00\x01\x1f\n\r\t\b\f", "quote": "\"\\/'"},
    {"lone": "x\ud800y", "\udfff": "key"},
    {"ints": [2**63 - 1, -(2**63), 2**64, -(10**40), Level.HIGH, True, False, None]},
    {"nan": float("nan"), "inf": float("inf"), "minus": float("-inf")},
    {"nested": {"z": {"y": [{"x": ()}, (1, "two")]}}, "empty": {}, "list": []},
    OrderedDict([("z", 1), ("a", 2)]),
    {1: "int key", 2.5: "float key", False: "bool key", None: "none key"},
    {Label("subclass"): Label("of str")},
    "just text",
    12345678901234567890123,
    [],
]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False},
        {"separators": (",", ":")},
    ],
)
@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_encoder_writes_what_json_dumps_writes(document: Any, options: dict[str, Any]) -> None:
    if options.get("sort_keys") and isinstance(document, dict) and None in document:
        with pytest.raises(TypeError):  # json.dumps cannot order None among strings either
            json.dumps(document, **options)
        return
    assert json_encoder(**options)(document) == json.dumps(document, **options)


def test_the_encoder_refuses_what_json_dumps_refuses() -> None:
    encode = json_encoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for unserialisable in ({"when": object()}, {"set": {1, 2}}, {(1, 2): "tuple key"}):
        with pytest.raises(TypeError) as ours:
            encode(unserialisable)
        with pytest.raises(TypeError) as theirs:
            json.dumps(unserialisable, sort_keys=True)
        assert str(ours.value) == str(theirs.value)


TEXTS = [
    '{"a": 1}',
    '{"a":1}\n',
    '{"a": [1, 2.5, "x"]} \r\n',
    '  {"a": 1}',
    '{"a": 1}\x0c',
    '\ufeff{"a": 1}',
    '{"a": 1}{"b": 2}',
    '{"a": 1} x',
    "[1,",
    "",
    "   ",
    "NaN",
    '{"n": -Infinity, "big": 1e400}',
    '{"lone": "\\ud800", "nul": "\\u0000"}',
    '{"a": 1, "a": 2}',
    "12345678901234567890123",
    "9" * 5000,
    "[" * 100_000 + "]" * 100_000,
    '"\\u00e9\\ud83d\\ude00"',
]


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_the_decoder_answers_what_json_loads_answers(text: str) -> None:
    decode = json_decoder()
    try:
        expected: Any = ("value", json.loads(text))
    except (ValueError, RecursionError) as exc:
        expected = ("error", type(exc), str(exc))
    try:
        got: Any = ("value", decode(text))
    except (ValueError, RecursionError) as exc:
        got = ("error", type(exc), str(exc))
    assert repr(got) == repr(expected)


class Opaque:
    def __str__(self) -> str:
        return "opaque \u00e9"


@pytest.mark.parametrize("document", [*DOCUMENTS[:6], {"when": Opaque(), "set": {1}}])
def test_an_encoder_with_a_default_writes_what_json_dumps_writes(document: Any) -> None:
    """The canonical entries of the transparency logs write values JSON cannot hold as their
    ``str``, sorted, ASCII only: byte for byte what ``json.dumps`` writes."""
    options: dict[str, Any] = {
        "sort_keys": True,
        "separators": (",", ":"),
        "ensure_ascii": True,
        "default": str,
    }
    if isinstance(document, dict) and any(not isinstance(key, str) for key in document):
        options["sort_keys"] = False  # mixed key types cannot be ordered by either
    assert json_encoder(**options)(document) == json.dumps(document, **options)


def test_an_encoder_refusing_non_finite_numbers_refuses_as_json_dumps_does() -> None:
    encode = json_encoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert encode([1.5, "x"]) == json.dumps([1.5, "x"], ensure_ascii=False, separators=(",", ":"))
    for number in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ValueError) as ours:
            encode([[number]])
        with pytest.raises(ValueError) as theirs:
            json.dumps([[number]], allow_nan=False)
        assert str(ours.value) == str(theirs.value)


def test_an_encoder_with_the_same_errors_tells_a_value_holding_itself_from_deep_nesting() -> None:
    """Callers that answer the two differently (a tool's result) get ``json.dumps``'s errors."""
    encode = json_encoder(separators=(",", ":"), same_errors=True)
    holds_itself: list[Any] = [1]
    holds_itself.append(holds_itself)
    with pytest.raises(ValueError) as ours:
        encode(holds_itself)
    with pytest.raises(ValueError) as theirs:
        json.dumps(holds_itself, separators=(",", ":"))
    assert str(ours.value) == str(theirs.value)
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        encode(deep)
    assert encode({"b": [1.5, None], "a": "é"}) == json.dumps(
        {"b": [1.5, None], "a": "é"}, separators=(",", ":")
    )


def test_an_encoder_with_the_same_errors_refuses_a_large_value_holding_itself_at_once() -> None:
    """A tree with a parent link is refused when the encoder meets the root again, not written
    out at every level up to the recursion limit first (seconds of CPU and hundreds of MiB)."""
    encode = json_encoder(separators=(",", ":"), same_errors=True)
    tree: dict[str, Any] = {"children": [{"id": n} for n in range(10_000)]}
    tree["parent"] = tree
    started = time.thread_time()
    with pytest.raises(ValueError, match="Circular reference"):
        encode(tree)
    assert time.thread_time() - started < 0.5
    assert encode({"tree": [1, 2]}) == '{"tree":[1,2]}'  # nothing left over from the refusal
