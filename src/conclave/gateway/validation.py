"""Argument and output checks against a tool's JSON Schema, and redaction of sensitive fields."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import jsonschema_rs
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import SchemaError

REDACTED = "***REDACTED***"
# Field names that are redacted whatever the schema says: a safety net for careless plug-ins.
_SENSITIVE_NAME = re.compile(
    r"(pass(word|phrase)?|secret|token|api[_-]?key|authorization|credential|private[_-]?key)$",
    re.IGNORECASE,
)
_MAX_ERRORS = 20


@dataclass(frozen=True)
class SchemaCheck:
    """A JSON Schema compiled twice: ``reference`` (the ``jsonschema`` package) decides and words
    the errors; ``fast`` (compiled Rust, when it accepts the schema) answers the common case, a
    valid instance, about fifty times faster. Where the two disagree the reference wins."""

    reference: Draft202012Validator
    fast: Any = None


def compile_schema(schema: Mapping[str, Any], *, where: str) -> SchemaCheck:
    """Check ``schema`` is a valid JSON Schema and return a reusable validator for it."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"{where}: invalid JSON Schema: {exc.message}") from exc
    return SchemaCheck(Draft202012Validator(schema, format_checker=FormatChecker()), _fast(schema))


def _fast(schema: Mapping[str, Any]) -> Any:
    # Its stubs ask for a dict; any other mapping is refused with a ValueError, handled below.
    document = cast("dict[str, Any]", schema)
    try:  # offline: a remote $ref is never fetched; such a schema is left to the reference
        return jsonschema_rs.Draft202012Validator(document, validate_formats=True, offline=True)
    except (ValueError, TypeError, jsonschema_rs.ReferencingError):
        return None


def _surely_valid(check: SchemaCheck, instance: Any) -> bool:
    if check.fast is None:
        return False
    try:
        return bool(check.fast.is_valid(instance))
    except (ValueError, TypeError, OverflowError):  # a value it cannot read: ask the reference
        return False


def schema_errors(check: SchemaCheck, instance: Any) -> list[dict[str, str]]:
    """Field errors of ``instance``: ``field`` is a JSON Pointer into the arguments."""
    if _surely_valid(check, instance):
        return []
    errors = []
    for error in sorted(check.reference.iter_errors(instance), key=lambda e: list(e.absolute_path))[
        :_MAX_ERRORS
    ]:
        pointer = "/" + "/".join(str(part) for part in error.absolute_path)
        errors.append(
            {"field": pointer, "message": error.message[:500], "rule": str(error.validator)}
        )
    return errors


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
