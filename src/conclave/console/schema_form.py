"""A tool's JSON Schema read for people: a table of its properties, and a form that builds its
arguments (the playground, ``pages/tools.py``).

Nothing here trusts the schema: it comes from the gateway's catalogue, which plug-ins and HTTP
tool catalogues fill. Its text is only ever shown through the templates' autoescaping, its walk
is bounded (:data:`MAX_DEPTH`, :data:`MAX_ROWS`, :data:`MAX_FIELDS`) and keywords of the wrong
type are ignored. What the form cannot express (arrays, free-form objects, ``anyOf``, a ``$ref``)
becomes a JSON textarea for that field.

Form values are converted strictly, before any call is made: numbers follow JSON's grammar and
must be finite, integers fit in 64 bits, text holds no NUL and no lone surrogate (the same values
the services refuse, :mod:`conclave.platform.inputs`), and JSON fields are JSON.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from conclave.platform.inputs import INT_MAX, INT_MIN, find_unsafe, text_problem

MAX_DEPTH = 4
"""Nested objects shown as nested fieldsets; deeper ones are a JSON field."""
MAX_FIELDS = 200
"""Form fields of one tool; a schema with more gets the raw JSON editor only."""
MAX_ROWS = 500
"""Rows of one schema table; the rest is left out, with a note (the raw schema is shown too)."""
MAX_NUMBER_CHARS = 100

_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_JSON_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_SCALARS = ("string", "integer", "number", "boolean")
_BOUNDS = (
    ("minimum", "≥"),
    ("exclusiveMinimum", ">"),
    ("maximum", "≤"),
    ("exclusiveMaximum", "<"),
    ("multipleOf", "multiple of"),
    ("minLength", "length ≥"),
    ("maxLength", "length ≤"),
    ("pattern", "pattern"),
    ("format", "format"),
    ("minItems", "items ≥"),
    ("maxItems", "items ≤"),
    ("uniqueItems", "unique items"),
    ("minProperties", "properties ≥"),
    ("maxProperties", "properties ≤"),
)

Widget = Literal["text", "select", "number", "checkbox", "json", "group"]


def _as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _is_number(value: Any) -> bool:
    """A finite number a form input can carry (an integer past a double's range is none: a
    401-digit bound made ``math.isfinite`` raise OverflowError)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def type_of(schema: Mapping[str, Any]) -> str:
    """The schema's type as shown: ``string``, ``integer | null``, ``object``, ``any``…"""
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind
    if isinstance(kind, list) and all(isinstance(item, str) for item in kind) and kind:
        return " | ".join(kind)
    for combinator in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(combinator), list):
            return combinator
    if "$ref" in schema:
        return "$ref"
    if "enum" in schema or "const" in schema:
        return "enum"
    return "any"


def _single_type(schema: Mapping[str, Any]) -> str | None:
    """The one type a value takes (``null`` aside), or ``None`` when it may take several."""
    kind = schema.get("type")
    if isinstance(kind, list):
        others = [item for item in kind if item != "null"]
        kind = others[0] if len(others) == 1 else None
    return kind if isinstance(kind, str) else None


def _required_of(schema: Mapping[str, Any]) -> set[str]:
    required = schema.get("required")
    if not isinstance(required, list):
        return set()
    return {name for name in required if isinstance(name, str)}


def _properties_of(schema: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    properties = _as_mapping(schema.get("properties"))
    return [(str(name), _as_mapping(sub)) for name, sub in properties.items()]


# -- the readable table -----------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaRow:
    """One property of a schema as a table row; ``depth`` indents a nested one."""

    name: str
    parent: str
    depth: int
    type: str
    required: bool
    description: str
    enum: list[str]
    default: str | None
    bounds: list[str]


@dataclass
class SchemaTable:
    """A schema's properties, depth first, and whether some were left out."""

    rows: list[SchemaRow] = field(default_factory=list)
    cut: bool = False


def schema_table(schema: Any) -> SchemaTable:
    """The properties of ``schema`` (an object schema) as rows; nested objects' properties and
    array items follow their parent, indented."""
    table = SchemaTable()
    _add_rows(table, _as_mapping(schema), "", 0)
    return table


def _add_rows(table: SchemaTable, schema: Mapping[str, Any], parent: str, depth: int) -> bool:
    required = _required_of(schema)
    return all(
        _add_row(table, name, parent, sub, depth, name in required)
        for name, sub in _properties_of(schema)
    )


def _add_row(
    table: SchemaTable,
    name: str,
    parent: str,
    schema: Mapping[str, Any],
    depth: int,
    required: bool,
) -> bool:
    if len(table.rows) >= MAX_ROWS or depth > 2 * MAX_DEPTH:
        table.cut = True
        return False
    table.rows.append(_row(name, parent, schema, depth, required))
    if _properties_of(schema) and not _add_rows(table, schema, f"{parent}{name}.", depth + 1):
        return False
    items = schema.get("items")
    if isinstance(items, Mapping) and items:
        return _add_row(table, f"{name}[]", parent, items, depth + 1, False)
    return True


def _row(
    name: str, parent: str, schema: Mapping[str, Any], depth: int, required: bool
) -> SchemaRow:
    enum = schema.get("enum")
    values = list(enum) if isinstance(enum, list) else []
    if "const" in schema:
        values = [schema["const"]]
    bounds = [
        f"{word} {_json_text(schema[keyword])}" if keyword != "uniqueItems" else word
        for keyword, word in _BOUNDS
        if keyword in schema and (keyword != "uniqueItems" or schema[keyword] is True)
    ]
    description = schema.get("description")
    title = schema.get("title")
    text = str(description) if description is not None else ""
    if isinstance(title, str) and title and title != text:
        text = f"{title}. {text}" if text else title
    return SchemaRow(
        name=name,
        parent=parent,
        depth=depth,
        type=type_of(schema),
        required=required,
        description=text,
        enum=[_json_text(value) for value in values[:100]],
        default=_json_text(schema["default"]) if "default" in schema else None,
        bounds=bounds,
    )


# -- the form ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FormField:
    """One field of the playground form. ``name`` is the input's name (``arg-3``): fields are
    numbered in schema order, so the POST is read back with the same schema, whatever the
    property names hold."""

    key: str
    name: str
    widget: Widget
    type: str
    required: bool
    description: str
    depth: int
    options: tuple[str, ...] = ()
    option_values: tuple[Any, ...] = ()
    default: str | None = None
    checked: bool = False
    minimum: str | None = None
    maximum: str | None = None
    step: str | None = None
    max_length: int | None = None
    integer: bool = False
    children: tuple[FormField, ...] = ()


@dataclass(frozen=True)
class ToolForm:
    """A tool's form; ``fields`` empty and ``too_large`` when only raw JSON can say it."""

    fields: tuple[FormField, ...]
    too_large: bool = False

    def walk(self) -> list[FormField]:
        """Every field, nested ones included, depth first."""
        found: list[FormField] = []
        stack = list(reversed(self.fields))
        while stack:
            item = stack.pop()
            found.append(item)
            stack.extend(reversed(item.children))
        return found


def build_form(schema: Any) -> ToolForm:
    """The form of an object schema (a tool's ``inputSchema``)."""
    counter = [0]
    try:
        fields = _fields(_as_mapping(schema), 0, counter)
    except _TooLarge:
        return ToolForm((), too_large=True)
    return ToolForm(fields)


class _TooLarge(Exception):
    pass


def _fields(schema: Mapping[str, Any], depth: int, counter: list[int]) -> tuple[FormField, ...]:
    required = _required_of(schema)
    return tuple(
        _field(name, sub, depth, name in required, counter) for name, sub in _properties_of(schema)
    )


def _field(
    key: str, schema: Mapping[str, Any], depth: int, required: bool, counter: list[int]
) -> FormField:
    counter[0] += 1
    if counter[0] > MAX_FIELDS:
        raise _TooLarge()
    common: dict[str, Any] = {
        "key": key,
        "name": f"arg-{counter[0]}",
        "type": type_of(schema),
        "required": required,
        "description": str(schema.get("description") or ""),
        "depth": depth,
        "default": _json_text(schema["default"]) if "default" in schema else None,
    }
    kind = _single_type(schema)
    enum = schema.get("enum")
    if "const" in schema:
        enum = [schema["const"]]
    if isinstance(enum, list) and enum and len(enum) <= 1000:
        shown = tuple(value if isinstance(value, str) else _json_text(value) for value in enum)
        return FormField(widget="select", options=shown, option_values=tuple(enum), **common)
    if kind == "string":
        max_length = schema.get("maxLength")
        limit = max_length if isinstance(max_length, int) and max_length >= 0 else None
        return FormField(widget="text", max_length=limit, **common)
    if kind in ("integer", "number"):
        common.update(_number_attributes(schema, kind))
        return FormField(widget="number", integer=kind == "integer", **common)
    if kind == "boolean":
        return FormField(widget="checkbox", checked=schema.get("default") is True, **common)
    if kind == "object" and _properties_of(schema) and depth < MAX_DEPTH and _plain(schema):
        children = _fields(schema, depth + 1, counter)
        return FormField(widget="group", children=children, **common)
    return FormField(widget="json", **common)


def _plain(schema: Mapping[str, Any]) -> bool:
    """Whether an object schema says all it holds in ``properties`` (no combinator to honour)."""
    return not any(key in schema for key in ("anyOf", "oneOf", "allOf", "$ref", "if", "not"))


def _number_attributes(schema: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """``min``, ``max`` and ``step`` of a number input (an exclusive bound only for integers,
    where it is the next integer; the gateway checks the schema's bounds in any case)."""
    integer = kind == "integer"
    low: Any = schema.get("minimum")
    high: Any = schema.get("maximum")
    low_exclusive: Any = schema.get("exclusiveMinimum")
    high_exclusive: Any = schema.get("exclusiveMaximum")
    if integer and _is_number(low_exclusive):
        low = math.floor(low_exclusive) + 1
    if integer and _is_number(high_exclusive):
        high = math.ceil(high_exclusive) - 1
    if low_exclusive is True:  # draft 4: the bound itself is out
        low = math.floor(low) + 1 if integer and _is_number(low) else None
    if high_exclusive is True:
        high = math.ceil(high) - 1 if integer and _is_number(high) else None
    step: Any = schema.get("multipleOf")
    if not (_is_number(step) and step > 0):
        step = 1 if integer else None
    return {
        "minimum": _number_text(low),
        "maximum": _number_text(high),
        "step": _number_text(step) or "any",
    }


def _number_text(value: Any) -> str | None:
    return repr(value) if _is_number(value) else None


# -- form values to arguments -----------------------------------------------------------------


@dataclass
class Conversion:
    """The arguments a form gives, or the problems that stopped it (by field name)."""

    arguments: dict[str, Any] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)


_ABSENT = object()


def form_arguments(form: ToolForm, values: Mapping[str, str]) -> Conversion:
    """The arguments the submitted ``values`` (input name → text) stand for. An empty optional
    field is left out, so the tool's own default applies."""
    conversion = Conversion()
    conversion.arguments = _object_of(form.fields, values, conversion.problems)
    return conversion


def _object_of(
    fields: tuple[FormField, ...], values: Mapping[str, str], problems: dict[str, str]
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for item in fields:
        value = _value_of(item, values, problems)
        if value is not _ABSENT:
            result[item.key] = value
    return result


def _value_of(item: FormField, values: Mapping[str, str], problems: dict[str, str]) -> Any:
    if item.widget == "group":
        inner = _object_of(item.children, values, problems)
        return inner if inner or item.required else _ABSENT
    text = values.get(item.name)
    if item.widget == "checkbox":
        if text is not None:
            return True
        return False if item.required or item.checked else _ABSENT
    if text is None:
        return _ABSENT
    kind = text_problem(text)
    if kind is not None:
        problems[item.name] = _UNSAFE_TEXT[kind]
        return _ABSENT
    if item.widget == "text":
        return text if text or item.required else _ABSENT
    if not text.strip():
        return _ABSENT
    try:
        if item.widget == "select":
            return _option(item, text)
        if item.widget == "number":
            return parse_number(text.strip(), integer=item.integer)
        return parse_json(text)
    except ValueError as exc:
        problems[item.name] = str(exc)
        return _ABSENT


_UNSAFE_TEXT = {
    "nul": "The text holds a NUL character, which no service accepts.",
    "lone_surrogate": "The text holds a lone surrogate (not UTF-8), which no service accepts.",
}


def _option(item: FormField, text: str) -> Any:
    if not re.fullmatch(r"[0-9]{1,6}", text) or int(text) >= len(item.option_values):
        raise ValueError("Choose one of the listed values.")
    return item.option_values[int(text)]


def parse_number(text: str, *, integer: bool) -> int | float:
    """``text`` as a JSON number: finite, an integer within 64 bits (``ValueError`` otherwise,
    with a sentence for the user). An integer-typed field takes ``1e3`` but not ``1.5``."""
    if len(text) > MAX_NUMBER_CHARS or not _JSON_NUMBER.fullmatch(text):
        raise ValueError("Write a number such as 42, -1.5 or 2e-3 (no NaN or Infinity).")
    try:
        exact = Decimal(text)
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimal text
        raise ValueError("Write a number.") from None
    if integer or _JSON_INTEGER.fullmatch(text):
        if exact != exact.to_integral_value():
            raise ValueError("Write a whole number.")
        # Compared before int(): 1e999999999 must not be expanded to its digits.
        if not INT_MIN <= exact <= INT_MAX:
            raise ValueError("The number is outside the 64-bit integer range.")
        return int(exact)
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("The number is too large to be a finite double.")
    return value


class _NonFiniteConstant(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NonFiniteConstant(f"{name} is not JSON: numbers must be finite.")


def parse_json(text: str) -> Any:
    """``text`` as strict JSON: no ``NaN``/``Infinity``, and no value the services refuse
    (``ValueError`` with a sentence saying what and where)."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("The JSON is nested too deeply.") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"Not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).") from None
    except _NonFiniteConstant:
        raise
    except ValueError:
        # Python refuses integers of over 4,300 digits (int_max_str_digits) in its own words.
        raise ValueError("Integers must fit in 64 bits.") from None
    finding = find_unsafe(value)
    if finding is not None:
        if not finding.location:
            raise ValueError(finding.message)
        raise ValueError(f"{finding.message.rstrip('.')} (at {finding.field}).")
    return value


def raw_arguments(text: str) -> Any:
    """The whole argument object typed as JSON (``ValueError`` when it is not one)."""
    kind = text_problem(text)
    if kind is not None:
        raise ValueError(_UNSAFE_TEXT[kind])
    value = parse_json(text)
    if not isinstance(value, dict):
        raise ValueError("The arguments are a JSON object: {…}.")
    return value
