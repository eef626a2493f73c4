"""Checks an upload passes before anything is stored: metadata, coordinates, names, ids, and
values no store, bus or response can carry (422 ``UNSAFE_INPUT``)."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from typing import Any

from conclave.platform.errors import Unprocessable
from conclave.platform.inputs import INT_MAX, UnsafeInput, UnsafeValue, check_safe, text_problem
from conclave.platform.problem_types import ProblemCode

# Matched whole (``fullmatch``): ``$`` also matches before a final newline, so "cam-7\n" passed.
_SAFE_ID = re.compile(r"[A-Za-z0-9._:/@+=-]{1,128}")
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,256}")
_COORDINATES = (("latitude", "lat", 90.0), ("longitude", "lon", 180.0))
MAX_FILENAME = 255


def sanitize_filename(raw: str) -> str:
    """A file name safe to store and echo back: no path, no control characters, bounded length.

    Clients send whatever they like (``../../etc/passwd``, ``C:\\x\\y``, newlines); only the last
    path component survives, stripped of control and format characters and of leading dots.
    """
    name = raw.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(c for c in name if unicodedata.category(c)[0] != "C")
    name = name.strip().lstrip(".").strip()
    if len(name.encode()) > MAX_FILENAME:
        _stem, dot, suffix = name.rpartition(".")
        keep = suffix[:16] if dot and len(suffix) <= 16 else ""
        name = name.encode()[: MAX_FILENAME - len(keep) - 1].decode("utf-8", "ignore")
        name = f"{name}.{keep}" if keep else name
    return name or "upload"


def _non_finite(token: str) -> float:
    # ``NaN`` and ``Infinity`` are not JSON; decoded as the floats they name, they are refused
    # below with the same answer as ``1e309`` (which the decoder turns into infinity itself).
    return float(token)


def _bounded_int(digits: str) -> int:
    # More digits than any 64-bit integer has: refused as out of range below, without converting
    # (or failing on) thousands of digits.
    return int(digits) if len(digits) <= 20 else INT_MAX + 1


def check_upload_headers(headers: dict[str, str | None]) -> None:
    """:class:`UnsafeInput` when an upload header holds text no store can keep (NUL)."""
    for name, value in headers.items():
        kind = text_problem(value) if value else None
        if kind is not None:
            raise UnsafeInput(UnsafeValue(("header", name), kind))


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _coordinate(metadata: dict[str, Any], long_name: str, short_name: str, bound: float) -> None:
    for key in (long_name, short_name):
        if key not in metadata or metadata[key] is None:
            continue
        value = metadata[key]
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                value = math.nan
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise Unprocessable(
                f"metadata.{key} must be a number.",
                code=ProblemCode.INVALID_COORDINATES,
                errors=[{"field": f"metadata.{key}", "message": "not a number"}],
            )
        if not -bound <= value <= bound:
            raise Unprocessable(
                f"metadata.{key} must be between -{bound:g} and {bound:g}.",
                code=ProblemCode.INVALID_COORDINATES,
                errors=[{"field": f"metadata.{key}", "message": "out of range"}],
            )


def parse_metadata(raw: str | None, *, max_bytes: int, max_depth: int) -> dict[str, Any]:
    """The ``metadata`` form field: a JSON object within limits with valid coordinates."""
    if raw is None or not raw.strip():
        return {}
    if len(raw.encode()) > max_bytes:
        raise Unprocessable(
            f"metadata exceeds {max_bytes} bytes.", code=ProblemCode.METADATA_TOO_LARGE
        )
    try:
        value = json.loads(raw, parse_constant=_non_finite, parse_int=_bounded_int)
    except (ValueError, RecursionError) as exc:
        raise Unprocessable(
            "metadata is not valid JSON.",
            code=ProblemCode.INVALID_METADATA,
            errors=[{"field": "metadata", "message": str(exc)[:200]}],
        ) from exc
    if not isinstance(value, dict):
        raise Unprocessable(
            "metadata must be a JSON object.",
            code=ProblemCode.INVALID_METADATA,
            errors=[{"field": "metadata", "message": f"got {type(value).__name__}"}],
        )
    check_safe(value, ("metadata",))
    if _depth(value) > max_depth:
        raise Unprocessable(
            f"metadata nests deeper than {max_depth} levels.", code=ProblemCode.INVALID_METADATA
        )
    for long_name, short_name, bound in _COORDINATES:
        _coordinate(value, long_name, short_name, bound)
    return value


def optional_id(value: str | None, field_name: str) -> str | None:
    """A correlation id or similar reference: 1-128 plain characters, or absent."""
    if value is None or value == "":
        return None
    if not _SAFE_ID.fullmatch(value):
        raise Unprocessable(
            f"{field_name} must be 1-128 characters of A-Z a-z 0-9 . _ : / @ + = -.",
            code=ProblemCode.VALIDATION_FAILED,
            errors=[{"field": field_name, "message": "invalid characters or length"}],
        )
    return value


def idempotency_key(value: str | None) -> str | None:
    """An idempotency key: 1-256 printable ASCII characters, or absent."""
    if value is None or value == "":
        return None
    if not _IDEMPOTENCY_KEY.fullmatch(value):
        raise Unprocessable(
            "The idempotency key must be 1-256 printable ASCII characters.",
            code=ProblemCode.VALIDATION_FAILED,
            errors=[{"field": "idempotency_key", "message": "invalid"}],
        )
    return value
