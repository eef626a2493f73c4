"""The boundary's unsafe-value check: what it finds, where it says it is, and the escaped copy."""

from __future__ import annotations

import json

import pytest

from conclave.platform.inputs import (
    UnsafeInput,
    escape_unsafe,
    find_unsafe,
    holds_unsafe,
    loads_checked,
)


@pytest.mark.parametrize(
    ("body", "field", "kind"),
    [
        (b'{"args": {"message": "\\ud800"}}', "body.args.message", "lone_surrogate"),
        (b'{"a": ["ok", "x\\u0000y"]}', "body.a.1", "nul"),
        (b'{"n": NaN}', "body.n", "non_finite_number"),
        (b'{"n": -Infinity}', "body.n", "non_finite_number"),
        (b'{"n": 1e309}', "body.n", "non_finite_number"),
        (b'{"n": 9223372036854775808}', "body.n", "integer_out_of_range"),
        (b'{"\\udfff": 1}', "body.\\udfff", "lone_surrogate"),
    ],
)
def test_unsafe_values_are_refused_with_their_location(body: bytes, field: str, kind: str) -> None:
    with pytest.raises(UnsafeInput) as caught:
        loads_checked(body)
    error = caught.value
    assert (error.status, error.code) == (422, "UNSAFE_INPUT")
    assert error.errors == [{"field": field, "message": error.finding.message, "type": kind}]
    # The problem itself must be encodable (the location of a bad key is escaped).
    json.dumps(error.errors).encode("utf-8")


def test_ordinary_documents_pass() -> None:
    document = {"text": "naïve ☃ 𝄞", "n": [1.5, -(2**63), 2**63 - 1, True, None]}
    assert loads_checked(json.dumps(document)) == document
    assert find_unsafe(document) is None


def test_deep_documents_do_not_exhaust_the_stack() -> None:
    document: object = "\ud800"
    for _ in range(5000):
        document = [document]
    finding = find_unsafe(document)
    assert finding is not None and finding.kind == "lone_surrogate"
    assert len(finding.location) == 5000


def test_escaped_copy_can_be_stored_and_keeps_what_was_sent() -> None:
    escaped = escape_unsafe({"m": "a\ud800b\x00", "\udfff": [float("nan"), float("-inf"), 2**64]})
    assert escaped == {"m": "a\\ud800b\\u0000", "\\udfff": ["NaN", "-Infinity", str(2**64)]}
    assert find_unsafe(escaped) is None
    json.dumps(escaped, allow_nan=False).encode("utf-8")


class Tag(str):
    pass


def _nested(inner: object, depth: int) -> object:
    for _ in range(depth):
        inner = {"k": [inner]}
    return inner


@pytest.mark.parametrize(
    "document",
    [
        {"text": "naïve ☃ 𝄞", "n": [1.5, -(2**63), 2**63 - 1, True, False, None]},
        {"a": "x\ud800"},
        {"a": ["ok", "x\x00y"]},
        {"\udfff": 1},
        {"n": float("nan")},
        {"n": [float("-inf")]},
        {"n": 2**63},
        {"n": -(2**63) - 1},
        {2**64: "int key"},
        {float("inf"): "float key"},
        {"t": ("ok", "\x00")},
        {"t": (1, 2)},
        {"s": Tag("a\x00")},
        {"s": Tag("fine")},
        {"o": object()},
        "plain",
        "\ud800",
        2**70,
        [1, [2, [3.5, {"deep": "\x00"}]]],
        _nested("fine", 3_000),
        _nested("\ud800", 3_000),
    ],
)
def test_holds_unsafe_agrees_with_find_unsafe(document: object) -> None:
    assert holds_unsafe(document) is (find_unsafe(document) is not None)
