"""The schema reader and the form conversion on their own: what they make of odd schemas and odd
text (the pages' tests, ``test_tools.py``, cover the same through the console)."""

from __future__ import annotations

import pytest

from conclave.console.schema_form import (
    MAX_ROWS,
    build_form,
    form_arguments,
    parse_number,
    raw_arguments,
    schema_table,
)


@pytest.mark.parametrize(
    ("text", "integer", "value"),
    [
        ("42", True, 42),
        ("-0", True, 0),
        ("1E3", True, 1000),
        ("9223372036854775807", True, 2**63 - 1),
        ("-9223372036854775808", True, -(2**63)),
        ("2.5e-1", False, 0.25),
        ("7", False, 7),
        ("1e-400", False, 0.0),
    ],
)
def test_numbers_in_jsons_grammar_are_read(text: str, integer: bool, value: float) -> None:
    parsed = parse_number(text, integer=integer)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(
    ("text", "integer"),
    [
        ("01", True),
        ("+1", True),
        ("1.", False),
        (".5", False),
        ("0x10", True),
        ("1_000", True),
        ("\uff11\uff12", True),  # fullwidth digits: Decimal and int() would take them
        ("nan", False),
        ("-Infinity", False),
        ("1e309", False),
        ("9223372036854775808", True),
        ("9223372036854775808", False),
        ("1" * 101, False),
    ],
)
def test_anything_else_is_refused(text: str, integer: bool) -> None:
    with pytest.raises(ValueError):
        parse_number(text, integer=integer)


def test_odd_schemas_give_a_form_and_a_table_without_failing() -> None:
    odd: dict[str, object] = {
        "type": "object",
        "properties": {
            "typeless": {},
            "not_a_schema": 5,
            "any_of": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "bad_bounds": {"type": "integer", "minimum": "zero", "maximum": float("inf")},
            "deep": {"type": "object", "properties": {"a": {"type": "object", "properties": {
                "b": {"type": "object", "properties": {"c": {"type": "object", "properties": {
                    "d": {"type": "object", "properties": {"e": {"type": "string"}}}}}}}}}}},
        },
        "required": "label",  # not a list: nothing is required
    }  # fmt: skip
    form = build_form(odd)
    widgets = {field.key: field.widget for field in form.walk()}
    assert widgets["typeless"] == widgets["not_a_schema"] == widgets["any_of"] == "json"
    assert widgets["bad_bounds"] == "number"
    bounds = next(field for field in form.walk() if field.key == "bad_bounds")
    assert (bounds.minimum, bounds.maximum) == (None, None)
    assert widgets["c"] == "group" and widgets["d"] == "json"  # four levels of fieldsets
    assert not any(field.required for field in form.walk())
    table = schema_table(odd)
    assert [row.parent + row.name for row in table.rows][-1] == "deep.a.b.c.d.e"
    assert schema_table("not a schema").rows == []

    huge = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10_000)}}
    cut = schema_table(huge)
    assert len(cut.rows) == MAX_ROWS and cut.cut
    assert build_form(huge).too_large


def test_an_optional_group_left_empty_is_left_out() -> None:
    form = build_form(
        {
            "type": "object",
            "properties": {
                "size": {"type": "object", "properties": {"w": {"type": "integer"}}},
                "on": {"type": "boolean", "default": True},
                "off": {"type": "boolean"},
            },
        }
    )
    names = {field.key: field.name for field in form.walk()}
    assert form_arguments(form, {}).arguments == {"on": False}  # unchecked, against a default
    both = form_arguments(form, {names["w"]: "3", names["on"]: "true", names["off"]: "true"})
    assert both.arguments == {"size": {"w": 3}, "on": True, "off": True}


def test_raw_arguments_are_an_object_of_safe_values() -> None:
    assert raw_arguments('{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    for text in ("[]", "NaN", '{"a": NaN}', '{"a": 1e999}', '{"\\u0000": 1}', "a\x00"):
        with pytest.raises(ValueError):
            raw_arguments(text)
    with pytest.raises(ValueError, match=r"^Integers must fit in 64 bits\.$"):
        raw_arguments('{"a": ' + "9" * 5000 + "}")  # beyond what Python's int() reads
    with pytest.raises(ValueError, match=r"^NaN is not JSON"):
        raw_arguments('{"a": NaN}')


def test_a_choice_is_the_index_of_a_listed_value() -> None:
    form = build_form({"type": "object", "properties": {"c": {"enum": ["a", 1, None]}}})
    name = form.fields[0].name
    assert form_arguments(form, {name: "2"}).arguments == {"c": None}
    for sent in ("3", "-1", "\u0661", "1" * 5000, " 1"):  # \u0661: ARABIC-INDIC DIGIT ONE
        problems = form_arguments(form, {name: sent}).problems
        assert problems == {name: "Choose one of the listed values."}, sent
