"""Restorer: normalization, backfill and repair of gaps before records are bound."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conclave.collector.agents.context import LoopTurns, content_hash

_MAX_KEY = 256
_TURN_ITEMS = 8  # items restored between two looks at the clock
MAX_DEPTH = 64


class _TooDeep(Exception):
    """Objects/arrays nest deeper than :data:`MAX_DEPTH`."""


def _normalized(value: Any, depth: int = 1) -> Any:
    """``value`` with its text trimmed and its object keys as trimmed text; raises
    :class:`_TooDeep` past :data:`MAX_DEPTH` nested objects/arrays, before the recursion could
    exhaust the stack (a source may hand over anything). The JSON types are told apart by exact
    type first, inline: this runs on every item of a bulk load."""
    if isinstance(value, dict):
        if depth > MAX_DEPTH:
            raise _TooDeep
        result = {}
        for key, item in value.items():
            kind = type(item)
            if kind is str:
                item = item.strip()
            elif kind is dict or kind is list or isinstance(item, dict | list | str):
                item = _normalized(item, depth + 1)
            result[(key if type(key) is str else str(key)).strip()] = item
        return result
    if isinstance(value, list):
        if depth > MAX_DEPTH:
            raise _TooDeep
        return [_normalized(item, depth + 1) for item in value]
    if isinstance(value, str):
        return value.strip()
    return value


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

    async def restore_batch(self, items: Sequence[Any]) -> Restoration:
        """Normalize one batch, giving the event loop turns as it goes (:class:`LoopTurns`)."""
        result = Restoration()
        turns = LoopTurns()
        for start in range(0, len(items), _TURN_ITEMS):
            part = self.restore(items[start : start + _TURN_ITEMS], first_index=start)
            result.records += part.records
            result.backfilled += part.backfilled
            result.rejected += part.rejected
            await turns.take()
        return result

    def restore(self, items: Sequence[Any], first_index: int = 0) -> Restoration:
        """Normalize items (numbered from ``first_index`` in the reasons for rejecting them)."""
        result = Restoration()
        for index, item in enumerate(items, start=first_index):
            if not isinstance(item, dict):
                result.rejected.append(f"item {index}: not an object ({type(item).__name__})")
                continue
            try:
                data = _normalized(item)
            except _TooDeep:
                result.rejected.append(f"item {index}: nested deeper than {MAX_DEPTH} levels")
                continue
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
