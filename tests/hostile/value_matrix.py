"""The hostile-value matrix: one request per (operation, place, hostile value), generated from a
service's own OpenAPI document.

For every operation a *base request* is built from the schema (required members only, each from
its default, example, first enum member, :data:`PLAUSIBLE` or a value fitting its type and
pattern); each case then puts one hostile value in one place and leaves the rest as the base has
it. The places:

* every string, number and untyped member of a JSON body, nested objects and array items
  included, plus one extra text and one extra number member in every free-form object, and a
  hostile *key* in every object; values travel as raw JSON text, so a lone surrogate is the
  escape ``"\ud800"`` an attacker's client sends;
* every text field of a multipart form; a field documented as JSON gets the JSON values inside
  an object;
* every query, path and header parameter: percent-encoded bytes (``%00``, ``%ED%A0%80``, ``%FF``)
  or hostile number text; raw bytes in headers.

What each value must get back (:class:`Expect`):

* lone surrogates, NUL, ``NaN``/``Infinity``/``1e309`` and integers beyond 64 bits anywhere in a
  JSON body (keys too): 422 ``UNSAFE_INPUT``, whatever else is wrong with the body, because the
  boundary refuses them before schema validation;
* a 5,000-digit integer (CPython refuses to parse it) and bytes that are not UTF-8 in a JSON
  body: 400 ``MALFORMED_JSON``, or 422 ``UNSAFE_INPUT`` (``ED A0 80`` decodes, as Python's JSON
  reader allows, to a lone surrogate);
* unsafe values in a form field (and in the JSON a form field carries), NUL in a path, hostile
  numbers in a path or query: a 4xx problem, with the route's own code;
* values that are harmless once decoded (``1e-400`` underflows to 0; invalid UTF-8 in a query,
  path or form field decodes to U+FFFD; header bytes decode as Latin-1; NUL in a query filter):
  anything but a server error.
"""

from __future__ import annotations

import copy
import enum
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

# Values no schema can express: what a field of this name needs so that the base request reaches
# the code behind the route (a registered expedition type, a media type the edge accepts, a cron
# the scheduler parses). Every other base value comes from the schema.
PLAUSIBLE: dict[str, Any] = {
    "media_type": "document",
    "expedition_type": "audit",
    "cron": "*/5 * * * *",
    "expression": "1 + 2",
    "timezone": "UTC",
}
BASE_TEXT = "matrix"
# Nothing listens there: a base URL can never reach anything off this machine.
BASE_URL = "http://127.0.0.1:9/matrix"
BASE_FILE = ("matrix.txt", b"Matrix field report: the dam is intact.\n")
# The members added to every free-form object, so hostile values reach inside it too.
FREE_FORM_TEXT, FREE_FORM_NUMBER = "matrix_note", "matrix_count"


class Expect(enum.Enum):
    """What a hostile value must get back."""

    UNSAFE_INPUT = "422 UNSAFE_INPUT"
    UNSAFE_OR_MALFORMED = "400 MALFORMED_JSON or 422 UNSAFE_INPUT"
    CLIENT_ERROR = "a 4xx problem"
    NO_SERVER_ERROR = "no server error (a 502-504 only where the base request gets it too)"


# The exact (status, code) pairs accepted; the other expectations accept any 4xx code.
EXPECTATIONS = {
    Expect.UNSAFE_INPUT: ((422, "UNSAFE_INPUT"),),
    Expect.UNSAFE_OR_MALFORMED: ((400, "MALFORMED_JSON"), (422, "UNSAFE_INPUT")),
}


@dataclass(frozen=True)
class Hostile:
    """One hostile value: a label for reports, its raw form, and the answer it must get."""

    label: str
    raw: bytes
    expect: Expect


HUGE_DIGITS = "9" * 5000  # past CPython's 4,300-digit limit: json.loads refuses to parse it

# Inside a JSON body, as raw JSON text.
JSON_STRINGS = (
    Hostile(r'lone high surrogate "\ud800"', rb'"\ud800"', Expect.UNSAFE_INPUT),
    Hostile(r'lone low surrogate "x\udfffy"', rb'"x\udfffy"', Expect.UNSAFE_INPUT),
    Hostile(r'NUL "a\u0000b"', rb'"a\u0000b"', Expect.UNSAFE_INPUT),
    # Not UTF-8 at all (the bytes of an encoded surrogate; a lone 0xFF): not a JSON text.
    Hostile("raw bytes ED A0 80", b'"\xed\xa0\x80"', Expect.UNSAFE_OR_MALFORMED),
    Hostile("raw byte FF", b'"\xff"', Expect.UNSAFE_OR_MALFORMED),
)
JSON_NUMBERS = (
    Hostile("NaN", b"NaN", Expect.UNSAFE_INPUT),
    Hostile("Infinity", b"Infinity", Expect.UNSAFE_INPUT),
    Hostile("-Infinity", b"-Infinity", Expect.UNSAFE_INPUT),
    Hostile("1e309 (overflows to infinity)", b"1e309", Expect.UNSAFE_INPUT),
    Hostile("-1e309", b"-1e309", Expect.UNSAFE_INPUT),
    Hostile("2**64", str(2**64).encode(), Expect.UNSAFE_INPUT),
    Hostile("-(2**63)-1", str(-(2**63) - 1).encode(), Expect.UNSAFE_INPUT),
    Hostile("5,000-digit integer", HUGE_DIGITS.encode(), Expect.UNSAFE_OR_MALFORMED),
    # Underflows to 0.0: a finite number, not unsafe; the field's own rules decide.
    Hostile("1e-400 (underflows to 0)", b"1e-400", Expect.NO_SERVER_ERROR),
)
JSON_KEYS = (
    Hostile(r'lone surrogate key "\ud800"', rb'"\ud800"', Expect.UNSAFE_INPUT),
    Hostile(r'NUL key "k\u0000"', rb'"k\u0000"', Expect.UNSAFE_INPUT),
)
# Query and path parameters, percent-encoded as they travel. The framework decodes invalid UTF-8
# to U+FFFD, so only NUL and the numbers remain hostile once decoded. No resource's id holds a
# NUL, so a path with one is a 4xx; a query filter with one may match nothing (a 200) as long
# as it never reaches a store that refuses it.
PATH_STRINGS = (
    Hostile("%00", b"%00", Expect.CLIENT_ERROR),
    Hostile("%ED%A0%80", b"%ED%A0%80", Expect.NO_SERVER_ERROR),
    Hostile("%FF", b"%FF", Expect.NO_SERVER_ERROR),
)
QUERY_STRINGS = (
    Hostile("%00", b"%00", Expect.NO_SERVER_ERROR),
    *PATH_STRINGS[1:],
)
PARAM_NUMBERS = (
    *(Hostile(value.label, value.raw, Expect.CLIENT_ERROR) for value in JSON_NUMBERS[:8]),
    Hostile("1e-400", b"1e-400", Expect.NO_SERVER_ERROR),
)
# Header values as raw bytes: Starlette decodes them as Latin-1, so only NUL can be unsafe; a
# header a route does not read may be ignored.
HEADER_VALUES = (
    Hostile("NUL byte", b"a\x00b", Expect.NO_SERVER_ERROR),
    Hostile("raw bytes ED A0 80", b"\xed\xa0\x80", Expect.NO_SERVER_ERROR),
    Hostile("raw byte FF", b"\xff", Expect.NO_SERVER_ERROR),
)
# Text fields of a multipart form, raw bytes (decoded as UTF-8 with replacement).
FORM_VALUES = (
    Hostile("NUL byte", b"a\x00b", Expect.CLIENT_ERROR),
    Hostile("raw bytes ED A0 80", b"\xed\xa0\x80", Expect.NO_SERVER_ERROR),
    Hostile("raw byte FF", b"\xff", Expect.NO_SERVER_ERROR),
)


@dataclass
class Request:
    """One request, ready to send: raw path and query (already percent-encoded), headers, body."""

    method: str
    url: str
    headers: dict[str, str | bytes] = field(default_factory=dict)
    content: bytes | None = None
    content_type: str | None = None


@dataclass(frozen=True)
class Case:
    """One hostile value in one place of one operation."""

    operation: str  # "POST /execute (tool echo)"
    place: str  # "body.args.message", "query.limit", "form.metadata.<key>"
    value: Hostile
    request: Request


@dataclass
class Operation:
    """An operation of the document: its base request and its cases."""

    name: str
    base: Request
    cases: list[Case]


# ---------------------------------------------------------------- schema walking


class Schemas:
    """Resolves ``$ref`` against the document's components and a schema's own ``$defs``."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self._components = document.get("components", {}).get("schemas", {})

    def resolve(self, schema: Any, defs: Mapping[str, Any]) -> dict[str, Any]:
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < 32:
            name = schema["$ref"].rsplit("/", 1)[-1]
            schema = defs.get(name) or self._components.get(name) or {}
            seen += 1
        return schema if isinstance(schema, dict) else {}


def _branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    options = schema.get("anyOf") or schema.get("oneOf")
    if not options:
        return [schema]
    return [option for option in options if option.get("type") != "null"]


def _kind(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((item for item in kind if item != "null"), None)
    if kind is None and "properties" in schema:
        kind = "object"
    if kind is None and "items" in schema:
        kind = "array"
    return kind or "any"


def _text_for(schema: dict[str, Any], name: str) -> str:
    if schema.get("format") == "date-time":
        return "2026-01-01T00:00:00Z"
    if schema.get("format") in ("uri", "url"):
        return BASE_URL
    candidates = [BASE_TEXT, "matrix-1", "a", "1"]
    pattern = schema.get("pattern")
    minimum = int(schema.get("minLength", 0))
    for candidate in candidates:
        text = candidate.ljust(minimum, "x")
        if pattern is None or re.search(pattern, text):
            return text
    return BASE_TEXT


def example(schemas: Schemas, schema: Any, defs: Mapping[str, Any], name: str = "") -> Any:
    """A plausible value of ``schema``: objects hold their required members only."""
    schema = schemas.resolve(schema, defs)
    if name in PLAUSIBLE:
        return PLAUSIBLE[name]
    for key in ("default", "example", "const"):
        if key in schema and schema[key] is not None:
            return copy.deepcopy(schema[key])
    if schema.get("examples"):
        return copy.deepcopy(schema["examples"][0])
    if schema.get("enum"):
        return schema["enum"][0]
    branch = _branches(schema)[0] if _branches(schema) else {}
    if branch is not schema:
        return example(schemas, branch, defs, name)
    kind = _kind(schema)
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            key: example(schemas, properties.get(key, {}), defs, key)
            for key in schema.get("required", [])
        }
    if kind == "array":
        count = int(schema.get("minItems", 0))
        return [example(schemas, schema.get("items", {}), defs, name) for _ in range(count)]
    if kind == "string":
        return _text_for(schema, name)
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        return int(low) + 1 if kind == "integer" else float(low) + 1.0
    if kind == "boolean":
        return True
    return BASE_TEXT


# A slot: where in the document (path), what it holds (string/number/any/key), and how to build
# the whole document with a marker in that place.
Slot = tuple[tuple[str | int, ...], str, Callable[[Any], Any]]
MARKER = "hostile-matrix-marker-7c1f"


def slots(
    schemas: Schemas, schema: Any, defs: Mapping[str, Any], name: str = "", depth: int = 0
) -> Iterator[Slot]:
    """Every place of ``schema`` a hostile value can go, each with a builder of the document."""
    schema = schemas.resolve(schema, defs)
    if depth > 8:
        return
    seen: set[tuple[tuple[str | int, ...], str]] = set()
    for branch in _branches(schema):
        for slot in _branch_slots(schemas, branch, defs, name, depth):
            if (slot[0], slot[1]) not in seen:
                seen.add((slot[0], slot[1]))
                yield slot


def _branch_slots(
    schemas: Schemas, schema: dict[str, Any], defs: Mapping[str, Any], name: str, depth: int
) -> Iterator[Slot]:
    schema = schemas.resolve(schema, defs)
    kind = _kind(schema)
    if kind == "object":
        yield from _object_slots(schemas, schema, defs, depth)
    elif kind == "array":
        items = schema.get("items", {})
        for path, slot_kind, build in slots(schemas, items, defs, name, depth + 1):
            yield (0, *path), slot_kind, _in_list(build)
    elif kind in ("string", "integer", "number", "any"):
        yield (), "number" if kind == "integer" else kind, (lambda value: value)


def _in_list(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: [build(value)]


def _object_slots(
    schemas: Schemas, schema: dict[str, Any], defs: Mapping[str, Any], depth: int
) -> Iterator[Slot]:
    base = example(schemas, {k: v for k, v in schema.items() if k != "default"}, defs)
    if not isinstance(base, dict):
        base = {}

    def put(key: str, build: Callable[[Any], Any]) -> Callable[[Any], Any]:
        return lambda value: {**base, key: build(value)}

    properties = schema.get("properties", {})
    for key, member in properties.items():
        for path, kind, build in slots(schemas, member, defs, key, depth + 1):
            yield (key, *path), kind, put(key, build)
    if not properties or schema.get("additionalProperties") is True:
        yield (FREE_FORM_TEXT,), "string", put(FREE_FORM_TEXT, lambda value: value)
        yield (FREE_FORM_NUMBER,), "number", put(FREE_FORM_NUMBER, lambda value: value)
    yield ("<key>",), "key", lambda value: {**base, value: BASE_TEXT}


def json_cases(slot: Slot, prefix: str) -> Iterator[tuple[str, Hostile, bytes]]:
    """(place, value, raw JSON document) for each hostile value fitting the slot."""
    path, kind, build = slot
    place = ".".join([prefix, *(str(part) for part in path)])
    values = {
        "string": JSON_STRINGS,
        "number": JSON_NUMBERS,
        "any": JSON_STRINGS + JSON_NUMBERS,
        "key": JSON_KEYS,
    }[kind]
    text = json.dumps(build(MARKER)).encode()
    for value in values:
        yield place, value, text.replace(json.dumps(MARKER).encode(), value.raw)


# ---------------------------------------------------------------- operations


def operations(
    document: Mapping[str, Any], catalogues: Mapping[str, list[dict[str, Any]]]
) -> Iterator[Operation]:
    """Every operation of ``document`` with its cases.

    ``catalogues`` maps a path prefix to the tool catalogue served at ``<prefix>/tools`` (the
    gateway's ``GET /tools``, finance mode's ``GET /v1/finance/tools``). A tool call under that
    prefix (a body with ``tool`` and a free-form ``args``: ``POST /execute``,
    ``POST /v1/finance/normalize``) becomes one operation per tool, its ``args`` described by
    the tool's own parameters schema.
    """
    schemas = Schemas(document)
    for path, item in document.get("paths", {}).items():
        for method, spec in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            body = spec.get("requestBody", {}).get("content", {})
            json_schema = body.get("application/json", {}).get("schema")
            tools = catalogues.get(path.rsplit("/", 1)[0], [])
            if json_schema is not None and tools and _is_tool_call(schemas, json_schema):
                for tool in tools:
                    yield _operation(
                        schemas, method, path, spec, _tool_call_schema(schemas, json_schema, tool),
                        f" (tool {tool['name']})",
                    )  # fmt: skip
            else:
                yield _operation(schemas, method, path, spec, json_schema, "")


def _is_tool_call(schemas: Schemas, schema: Any) -> bool:
    properties = schemas.resolve(schema, {}).get("properties", {})
    return "tool" in properties and "args" in properties


def _tool_call_schema(schemas: Schemas, schema: Any, tool: dict[str, Any]) -> dict[str, Any]:
    resolved = copy.deepcopy(schemas.resolve(schema, {}))
    resolved["properties"]["tool"] = {"type": "string", "const": tool["name"]}
    resolved["properties"]["args"] = tool["parameters"]
    resolved["required"] = sorted({*resolved.get("required", []), "tool", "args"})
    resolved.setdefault("$defs", {}).update(tool["parameters"].get("$defs", {}))
    return resolved


def _operation(
    schemas: Schemas,
    method: str,
    path: str,
    spec: Mapping[str, Any],
    json_schema: Any,
    suffix: str,
) -> Operation:
    name = f"{method.upper()} {path}{suffix}"
    parameters = spec.get("parameters", [])
    values = {
        (p["in"], p["name"]): _param_text(schemas, p)
        for p in parameters
        if p.get("required") or p["in"] == "path"
    }
    form = spec.get("requestBody", {}).get("content", {}).get("multipart/form-data", {})
    form_schema = schemas.resolve(form.get("schema", {}), {}) if form else None

    def request(
        params: Mapping[tuple[str, str], bytes | str] = values,
        content: bytes | None = None,
        fields: Mapping[str, bytes] | None = None,
    ) -> Request:
        url = path
        query = []
        headers: dict[str, str | bytes] = {}
        for (where, key), value in params.items():
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            if where == "path":
                url = url.replace("{" + key + "}", text)
            elif where == "query":
                query.append(f"{key}={text}")
            elif where == "header":
                headers[key] = value
        if query:
            url += "?" + "&".join(query)
        if form_schema is not None:
            body, kind = multipart(form_schema, fields or {})
            return Request(method.upper(), url, headers, body, kind)
        if json_schema is not None:
            if content is None:
                defs = schemas.resolve(json_schema, {}).get("$defs", {})
                content = json.dumps(example(schemas, json_schema, defs)).encode()
            return Request(method.upper(), url, headers, content, "application/json")
        return Request(method.upper(), url, headers)

    cases: list[Case] = []
    for parameter in parameters:
        key = (parameter["in"], parameter["name"])
        kind = _kind((_branches(schemas.resolve(parameter.get("schema", {}), {})) or [{}])[0])
        hostile: tuple[Hostile, ...]
        if parameter["in"] == "header":
            hostile = HEADER_VALUES
        elif kind in ("integer", "number"):
            hostile = PARAM_NUMBERS
        elif kind == "string":
            hostile = PATH_STRINGS if parameter["in"] == "path" else QUERY_STRINGS
        else:
            continue
        for value in hostile:
            place = f"{parameter['in']}.{parameter['name']}"
            cases.append(Case(name, place, value, request({**values, key: value.raw})))
    if json_schema is not None:
        defs = schemas.resolve(json_schema, {}).get("$defs", {})
        for slot in slots(schemas, json_schema, defs):
            for place, value, content in json_cases(slot, "body"):
                cases.append(Case(name, place, value, request(content=content)))
    if form_schema is not None:
        cases.extend(_form_cases(schemas, name, form_schema, request))
    return Operation(name, request(), cases)


def _param_text(schemas: Schemas, parameter: Mapping[str, Any]) -> str:
    schema = schemas.resolve(parameter.get("schema", {}), {})
    value = example(schemas, schema, {}, parameter["name"])
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _form_cases(
    schemas: Schemas,
    operation: str,
    schema: Mapping[str, Any],
    request: Callable[..., Request],
) -> Iterator[Case]:
    for name, member in schema.get("properties", {}).items():
        member = schemas.resolve(member, {})
        if _is_file(member) or _kind(member) != "string":
            continue
        for value in FORM_VALUES:
            yield Case(operation, f"form.{name}", value, request(fields={name: value.raw}))
        if "JSON" in member.get("description", ""):
            document = {"type": "object", "additionalProperties": True}
            for slot in slots(schemas, document, {}):
                for place, value, content in json_cases(slot, f"form.{name}"):
                    refused = Hostile(value.label, value.raw, _in_form(value))
                    yield Case(operation, place, refused, request(fields={name: content}))


def _in_form(value: Hostile) -> Expect:
    # Form fields are decoded as UTF-8 with replacement, so invalid bytes arrive as U+FFFD:
    # harmless. The rest is unsafe, and the field's JSON is the route's own to parse: any 4xx
    # refusal (with its own code) will do.
    try:
        value.raw.decode("utf-8")
    except UnicodeDecodeError:
        return Expect.NO_SERVER_ERROR
    if value.expect in (Expect.UNSAFE_INPUT, Expect.UNSAFE_OR_MALFORMED):
        return Expect.CLIENT_ERROR
    return value.expect


def _is_file(schema: Mapping[str, Any]) -> bool:
    if schema.get("format") == "binary":
        return True
    items = schema.get("items", {})
    return isinstance(items, dict) and items.get("format") == "binary"


BOUNDARY = "hostile-matrix-boundary"


def multipart(schema: Mapping[str, Any], fields: Mapping[str, bytes]) -> tuple[bytes, str]:
    """A multipart body: one file per required file field, and ``fields`` as text parts."""
    parts = []
    for name, member in schema.get("properties", {}).items():
        if _is_file(member) and name in schema.get("required", []):
            filename, content = BASE_FILE
            disposition = f'form-data; name="{name}"; filename="{filename}"'
            parts.append(_part(disposition, content))
    for name, content in fields.items():
        parts.append(_part(f'form-data; name="{name}"', content))
    body = b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()
    return body, f"multipart/form-data; boundary={BOUNDARY}"


def _part(disposition: str, content: bytes) -> bytes:
    head = f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
    return head + content + b"\r\n"
