"""Argument and output checks against a tool's JSON Schema, and redaction of sensitive fields."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import SchemaError

REDACTED = "***REDACTED***"
# Field names that are redacted whatever the schema says: a safety net for careless plug-ins.
_SENSITIVE_NAME = re.compile(
    r"(pass(word|phrase)?|secret|token|api[_-]?key|authorization|credential|private[_-]?key)$",
    re.IGNORECASE,
)
_MAX_ERRORS = 20


def compile_schema(schema: Mapping[str, Any], *, where: str) -> Draft202012Validator:
    """Check ``schema`` is a valid JSON Schema and return a reusable validator for it."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"{where}: invalid JSON Schema: {exc.message}") from exc
    return Draft202012Validator(schema, format_checker=FormatChecker())


def schema_errors(validator: Draft202012Validator, instance: Any) -> list[dict[str, str]]:
    """Field errors of ``instance``: ``field`` is a JSON Pointer into the arguments."""
    errors = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))[
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
