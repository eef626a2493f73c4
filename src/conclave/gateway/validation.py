"""Argument and output checks against a tool's JSON Schema, and redaction of sensitive fields."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import jsonschema_rs

REDACTED = "***REDACTED***"
# Field names that are redacted whatever the schema says: a safety net for careless plug-ins.
_SENSITIVE_NAME = re.compile(
    r"(pass(word|phrase)?|secret|token|api[_-]?key|authorization|credential|private[_-]?key)$",
    re.IGNORECASE,
)
_MAX_ERRORS = 20


@dataclass(frozen=True)
class SchemaCheck:
    """A JSON Schema compiled by ``jsonschema_rs`` (Rust), which decides and words every error.

    Tool schemas come from plug-ins, catalogues and upstream MCP servers, and arguments from any
    user: the check runs on the event loop, so it must cost time linear in what it reads. The
    ``jsonschema`` package's validator did not (an outside attack, issue 22): its ``pattern``
    runs Python's backtracking ``re`` (``^(a+)+$`` against 27 characters froze the gateway for
    12 s), its ``uniqueItems`` compares objects pairwise (8,000 items, 100 s), and it fetched a
    remote ``$ref`` with ``urllib`` outside the egress policy. The Rust validator's regular
    expressions have a backtracking limit, its ``uniqueItems`` hashes, and it is built
    ``offline``: a schema whose ``$ref`` leaves it is refused at registration."""

    validator: Any


def compile_schema(schema: Mapping[str, Any], *, where: str) -> SchemaCheck:
    """Check ``schema`` is a valid JSON Schema (Draft 2020-12) this gateway can apply, and return
    a reusable validator for it; ``ValueError`` naming ``where`` otherwise."""
    # Its stubs ask for a dict; any other mapping is refused with a ValueError, handled below.
    document = cast("dict[str, Any]", schema)
    try:
        jsonschema_rs.meta.validate(document)
    except (jsonschema_rs.ValidationError, ValueError, TypeError) as exc:
        raise ValueError(f"{where}: invalid JSON Schema: {_first_line(str(exc))}") from exc
    try:
        validator = jsonschema_rs.Draft202012Validator(
            document, validate_formats=True, offline=True
        )
    except (jsonschema_rs.ReferencingError, ValueError, TypeError) as exc:
        text = _first_line(str(exc))
        if isinstance(exc, jsonschema_rs.ReferencingError) or "Retrieval is disabled" in text:
            text = f"a $ref that does not point inside the schema (nothing is fetched): {text}"
        raise ValueError(f"{where}: unusable JSON Schema: {text}") from exc
    return SchemaCheck(validator)


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0][:300]


def schema_errors(check: SchemaCheck, instance: Any) -> list[dict[str, str]]:
    """Field errors of ``instance``: ``field`` is a JSON Pointer into the arguments, ``rule``
    the schema keyword that failed."""
    try:
        if check.validator.is_valid(instance):
            return []
        finite = _finite(instance)
        if finite is not instance:
            if check.validator.is_valid(finite):
                return []
            instance = finite
        found = check.validator.iter_errors(instance)
        errors = []
        for error in found:
            pointer = "/" + "/".join(str(part) for part in error.instance_path)
            rule = str(error.schema_path[-1]) if error.schema_path else "schema"
            errors.append({"field": pointer, "message": error.message[:500], "rule": rule})
            if len(errors) == _MAX_ERRORS:
                break
    except (ValueError, TypeError, OverflowError, RecursionError):
        # A value the validator cannot read (the inputs refuse most such values before).
        return [{"field": "/", "message": "A value cannot be checked.", "rule": "unreadable"}]
    return sorted(errors, key=lambda error: error["field"])


def _finite(value: Any) -> Any:
    """``value``, or a copy with each infinity or NaN a finite number of its sign: the Rust
    validator reads them as no number at all, where a tool's result that holds one (the
    gateway answers it as null, with a warning) is a number to its schema."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return 0.0 if math.isnan(value) else math.copysign(sys.float_info.max, value)
    if isinstance(value, dict):
        items = {key: _finite(item) for key, item in value.items()}
        changed = any(items[key] is not item for key, item in value.items())
        return items if changed else value
    if isinstance(value, list):
        copied = [_finite(item) for item in value]
        return copied if any(a is not b for a, b in zip(copied, value, strict=True)) else value
    return value


def depth_exceeds(value: Any, limit: int) -> bool:
    """True when ``value`` nests containers deeper than ``limit`` (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, list):
            children = current
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _is_sensitive(schema: Mapping[str, Any]) -> bool:
    return bool(schema.get("writeOnly") or schema.get("x-sensitive"))


def redact(value: Any, schema: Mapping[str, Any] | None) -> Any:
    """A copy of ``value`` with sensitive fields replaced by ``***REDACTED***``.

    Sensitive means marked ``writeOnly: true`` or ``x-sensitive: true`` in the schema (at any depth
    of ``properties``/``items``), or named like a secret (password, token, api_key, ...).
    """
    schema = schema or {}
    if isinstance(value, dict):
        properties = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
        redacted = {}
        for key, item in value.items():
            sub = properties.get(key, {}) if isinstance(properties, Mapping) else {}
            if (isinstance(sub, Mapping) and _is_sensitive(sub)) or _SENSITIVE_NAME.search(
                str(key)
            ):
                redacted[key] = REDACTED
            else:
                redacted[key] = redact(item, sub if isinstance(sub, Mapping) else None)
        return redacted
    if isinstance(value, list):
        items = schema.get("items", {}) if isinstance(schema, Mapping) else {}
        return [redact(item, items if isinstance(items, Mapping) else None) for item in value]
    return value
