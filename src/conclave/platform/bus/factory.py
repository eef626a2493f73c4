"""Pick the bus implementation from its URL."""

from __future__ import annotations

from dataclasses import dataclass

from conclave.platform.bus.base import EventBus
from conclave.platform.bus.entry import DEFAULT_MAX_EVENT_BYTES
from conclave.platform.bus.memory import MemoryBus
from conclave.platform.bus.redis_streams import RedisStreamsBus


@dataclass(frozen=True)
class BusOptions:
    """Tuning shared by both implementations."""

    stream_prefix: str = ""
    maxlen: int = 100_000
    max_deliveries: int = 5
    claim_idle_seconds: float = 60.0
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES


def create_bus(url: str, options: BusOptions | None = None) -> EventBus:
    """``memory://`` gives the in-process bus; ``redis://``/``rediss://`` gives Redis Streams."""
    options = options or BusOptions()
    if url.startswith("memory://"):
        return MemoryBus(
            maxlen=options.maxlen,
            max_deliveries=options.max_deliveries,
            claim_idle_seconds=options.claim_idle_seconds,
            max_event_bytes=options.max_event_bytes,
        )
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisStreamsBus(
            url,
            stream_prefix=options.stream_prefix,
            maxlen=options.maxlen,
            max_deliveries=options.max_deliveries,
            claim_idle_seconds=options.claim_idle_seconds,
            max_event_bytes=options.max_event_bytes,
        )
    raise ValueError(f"unsupported bus URL scheme: {url.split(':', 1)[0]!r}")
