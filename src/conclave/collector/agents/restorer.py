"""Restorer: normalization, backfill and repair of gaps before records are bound."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conclave.collector.agents.context import content_hash

_MAX_KEY = 256


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
    as key (so the same item still binds to the same record). Items that are not objects are
    rejected with a reason.
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
