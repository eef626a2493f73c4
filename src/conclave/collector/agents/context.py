"""What every agent of a running expedition shares: the expedition, the stores, progress."""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.collector.indexer import VectorIndexer
from conclave.collector.metrics import CollectorMetrics
from conclave.collector.semantic.base import SemanticMemory
from conclave.collector.sources.base import Source
from conclave.platform.jsontext import json_encoder
from conclave.settings import CollectorSettings

_canonical_json = json_encoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class LoopTurns:
    """Gives the event loop a turn whenever :data:`TURN_SECONDS` of work went by since the last
    one: an agent working through a source's batch in one go held it for 10 to 25 ms (1000
    small items) or seconds (200 wide ones), and the service answered nothing meanwhile. Counted
    in time, not items, so large items get turns as often as small ones; one item's own work is
    not cut (a source's limits bound it)."""

    def __init__(self) -> None:
        self._since = time.perf_counter()

    async def take(self) -> None:
        """Let the event loop run if this agent has had it for long enough."""
        if time.perf_counter() - self._since >= TURN_SECONDS:
            await asyncio.sleep(0)
            self._since = time.perf_counter()


TURN_SECONDS = 0.004


class ExpeditionFailed(Exception):
    """The expedition cannot succeed; the message is reported to the user as the reason."""

    def __init__(self, message: str, *, code: str = "EXPEDITION_FAILED") -> None:
        super().__init__(message)
        self.code = code


def content_hash(data: Any) -> str:
    """SHA-256 of the canonical JSON of ``data`` (key order and spacing do not matter)."""
    return hashlib.sha256(_canonical_json(data).encode()).hexdigest()


def record_digest(content_hash: str, document: str) -> bytes:
    """SHA-256 of a record as the store keeps it: its content hash and the JSON text of its
    data. A stored record whose digest is the one taken when a run wrote it is byte for byte
    what was written, so its content hash still matches its data (both were made from the same
    data, and JSON text decodes to data that hashes the same)."""
    return hashlib.sha256(f"{content_hash}{document}".encode()).digest()


@dataclass
class ProgressTracker:
    """Progress of a run, read by the heartbeat that persists it with the lease."""

    stages: tuple[str, ...] = ()
    stage: str | None = None
    items_done: int = 0
    items_total: int | None = None
    agents: list[str] = field(default_factory=list)

    def enter(self, stage: str, agent: str, total: int | None = None) -> None:
        """Start ``stage``, worked by ``agent``."""
        self.stage = stage
        self.items_done = 0
        self.items_total = total
        self.deploy(agent)

    def deploy(self, agent: str) -> None:
        """Record that ``agent`` took part."""
        if agent not in self.agents:
            self.agents.append(agent)

    def advance(self, count: int = 1) -> None:
        """``count`` more items of the current stage are done."""
        self.items_done += count

    def snapshot(self, *, finished: bool = False) -> dict[str, Any]:
        """The persisted progress record."""
        if finished:
            return {
                "fraction": 1.0,
                "stage": "done",
                "items_done": self.items_done,
                "items_total": self.items_total,
            }
        fraction = 0.0
        if self.stages and self.stage in self.stages:
            index = self.stages.index(self.stage)
            within = min(1.0, self.items_done / self.items_total) if self.items_total else 0.0
            fraction = (index + within) / len(self.stages)
        return {
            "fraction": round(fraction, 4),
            "stage": self.stage,
            "items_done": self.items_done,
            "items_total": self.items_total,
        }


BRIDGE_REQUESTER = "bridge"
"""The requester the Evidence bridge's expeditions record: one of the platform's
:data:`~conclave.platform.auth.RESERVED_USER_IDS`, so no user can be it."""


@dataclass
class ExpeditionContext:
    """One run of one expedition, as its agents see it."""

    expedition_id: str
    expedition_type: str
    target_collections: list[str]
    parameters: dict[str, Any]
    correlation_id: str | None
    engine: AsyncEngine
    memory: SemanticMemory
    indexer: VectorIndexer
    sources: dict[str, Source]
    settings: CollectorSettings
    metrics: CollectorMetrics
    progress: ProgressTracker = field(default_factory=ProgressTracker)
    requested_by: str | None = None
    """Who asked for the run: a user, the Evidence bridge (:data:`BRIDGE_REQUESTER`), or
    ``None`` for an internal caller."""

    def acting_user(self) -> str | None:
        """The user sources that read other services act for: the requester, unless the run is
        the collector's own (the bridge, an internal caller), which reads as the collector."""
        if self.requested_by is None or self.requested_by == BRIDGE_REQUESTER:
            return None
        return self.requested_by

    def collection(self, default: str = "default") -> str:
        """The collection a run writes into: the first target, else ``default``."""
        return self.target_collections[0] if self.target_collections else default
