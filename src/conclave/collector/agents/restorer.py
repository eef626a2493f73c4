"""Restorer: normalization, backfill and repair of gaps before records are bound."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conclave.collector.agents.context import content_hash

_MAX_KEY = 256
MAX_DEPTH = 64


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` objects/arrays; iterative, because the point
    is to refuse what would exhaust the stack of the recursive steps after it."""
    pending = [(value, 1)]
    while pending:
        current, depth = pending.pop()
        if isinstance(current, dict | list):
            if depth > limit:
                return True
            children = current.values() if isinstance(current, dict) else current
            pending.extend((child, depth + 1) for child in children)
    return False


@dataclass(frozen=True)
class Restored:
    """A record ready to bind: its key and normalized data."""

    key: str
    data: dict[str, Any]


@dataclass
class Restoration:
    """What the Restorer made of a batch."""

    records: list[Restored] = field(default_factory=list)
    backfilled: int = 0
    rejected: list[str] = field(default_factory=list)


def _normalize(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        return {str(k).strip(): _normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


class Restorer:
    """Trims text, fills defaults for missing fields and derives missing keys.

    ``key`` names the field used as record key; an item without one gets the hash of its content
    as key (so the same item still binds to the same record). Items that are not objects, or that
    hold a value no store can keep (lone surrogate, NUL, non-finite number, integer beyond 64
    bits: a source's data is outside input too), are rejected with a reason; the rest still bind.
    """

    name = "restorer"

    def __init__(self, key_field: str | None, defaults: Mapping[str, Any] | None = None) -> None:
        self._key_field = key_field
        self._defaults = dict(defaults or {})

    def restore(self, items: Sequence[Any]) -> Restoration:
        """Normalize one batch."""
        result = Restoration()
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                result.rejected.append(f"item {index}: not an object ({type(item).__name__})")
                continue
            if _deeper_than(item, MAX_DEPTH):
                result.rejected.append(f"item {index}: nested deeper than {MAX_DEPTH} levels")
                continue
            data = _normalize(item)
            for name, default in self._defaults.items():
                if data.get(name) in (None, ""):
                    data[name] = default
                    result.backfilled += 1
            key = data.get(self._key_field) if self._key_field else None
            if key in (None, ""):
                key = content_hash(data)
                result.backfilled += 1
            key = str(key)
            if len(key) > _MAX_KEY:
                result.rejected.append(f"item {index}: key longer than {_MAX_KEY} characters")
                continue
            result.records.append(Restored(key, data))
        return result
