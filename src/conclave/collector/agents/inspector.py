"""Inspector: quality and integrity checks over stored records, summarised as a score."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conclave.collector import store
from conclave.collector.agents.context import ExpeditionContext, content_hash, record_digest
from conclave.platform.jsontext import json_decoder

_PAGE = 1000
_MAX_ISSUES = 50
_READS_AHEAD = 1
# The data as the JSON column type reads its stored text (json.loads).
_loads = json_decoder()


@dataclass
class Inspection:
    """Checks run on a set of records. ``score`` = share of checked items without a finding."""

    checked: int = 0
    corrupted: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    rejected: int = 0

    @property
    def score(self) -> float:
        """1.0 when every item passed; items the Restorer rejected count as failures."""
        total = self.checked + self.rejected
        if total == 0:
            return 1.0
        bad = len(set(self.corrupted) | set(self.incomplete)) + self.rejected
        return round(1 - bad / total, 4)

    def summary(self) -> dict[str, Any]:
        """The results-summary form (finding lists capped)."""
        return {
            "score": self.score,
            "checked": self.checked,
            "rejected": self.rejected,
            "corrupted": len(self.corrupted),
            "incomplete": len(self.incomplete),
            "issues": (
                [f"{key}: content hash mismatch" for key in self.corrupted]
                + [f"{key}: missing required fields" for key in self.incomplete]
            )[:_MAX_ISSUES],
        }


class Inspector:
    """Recomputes each record's content hash (integrity) and checks required fields (quality)."""

    name = "inspector"

    def __init__(self, context: ExpeditionContext, required_fields: Sequence[str] = ()) -> None:
        self._context = context
        self._required = list(required_fields)

    def _check(self, records: Iterable[tuple[str, str, Any]], report: Inspection) -> None:
        """Check ``(key, stored content hash, data)`` of each record."""
        for key, stored_hash, data in records:
            report.checked += 1
            if content_hash(data) != stored_hash:
                report.corrupted.append(key)
            self._check_required(key, data, report)

    def _check_required(self, key: str, data: Any, report: Inspection) -> None:
        if self._required and (
            not isinstance(data, dict)
            or any(data.get(name) in (None, "") for name in self._required)
        ):
            report.incomplete.append(key)

    def _check_documents(
        self, rows: Iterable[Any], written: Mapping[str, bytes], report: Inspection
    ) -> None:
        """Check rows ``(key, stored content hash, JSON text of the data)``; ``written`` has
        the digests of what this run stored (:func:`record_digest`)."""
        for key, stored_hash, document in rows:
            expected = written.get(key)
            if expected is not None and expected == record_digest(stored_hash, document):
                # Still exactly as written, its hash made from the same data: it would hash
                # the same again, so only the required fields need the data.
                report.checked += 1
                if self._required:
                    self._check_required(key, _loads(document), report)
            else:
                self._check([(key, stored_hash, _loads(document))], report)

    async def inspect_keys(
        self, collection: str, keys: Sequence[str], *, written: Mapping[str, bytes] | None = None
    ) -> Inspection:
        """Inspect the records of ``keys`` (what a run just bound). ``written`` maps keys to
        the digests of the records as the run stored them (:attr:`Binder.bound`): a record
        still stored exactly so is not decoded and hashed again, any other one is.

        The next pages (:data:`_READS_AHEAD`) are read while one is checked, each on a
        connection of its own: the checks take little time next to the database's lookups."""
        written = written or {}
        report = Inspection()
        pages = [list(keys[start : start + _PAGE]) for start in range(0, len(keys), _PAGE)]
        engine = self._context.engine
        reads: deque[asyncio.Task[Sequence[Any]]] = deque()
        try:
            for index, page in enumerate(pages):
                while len(reads) <= _READS_AHEAD and index + len(reads) < len(pages):
                    upcoming = pages[index + len(reads)]
                    reads.append(
                        asyncio.create_task(store.stored_documents(engine, collection, upcoming))
                    )
                await asyncio.sleep(0)  # lets the new reads be sent before this page is checked
                self._check_documents(await reads.popleft(), written, report)
                self._context.progress.advance(len(page))
        finally:
            for read in reads:
                read.cancel()
        return report

    async def inspect_collection(self, collection: str) -> Inspection:
        """Inspect every record of ``collection``."""
        report = Inspection()
        after: str | None = None
        while rows := await store.iter_collection(
            self._context.engine, collection, after=after, limit=_PAGE
        ):
            self._check(((r.record_key, r.content_hash, r.data) for r in rows), report)
            self._context.progress.advance(len(rows))
            after = rows[-1].record_key
        return report
