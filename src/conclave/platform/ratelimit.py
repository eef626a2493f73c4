"""Token-bucket rate limiting: in memory for one process, in Redis so replicas share the buckets."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from conclave.platform.errors import RateLimited


@dataclass(frozen=True)
class Rate:
    """``per_second`` tokens refill continuously up to ``burst``; one request takes one token."""

    per_second: float
    burst: int

    @classmethod
    def parse(cls, text: str) -> Rate | None:
        """Parse ``"<requests>/<seconds>[:<burst>]"`` (``"100/60"``, ``"5/1:20"``); empty = none."""
        if not text.strip():
            return None
        spec, _, burst = text.partition(":")
        requests, _, seconds = spec.partition("/")
        count, window = int(requests), float(seconds or 1)
        if count <= 0 or window <= 0:
            raise ValueError(f"invalid rate {text!r}: use '<requests>/<seconds>[:<burst>]'")
        return cls(per_second=count / window, burst=int(burst) if burst else count)


class RateLimiter(Protocol):
    """Takes one token from the bucket ``key``; returns 0 or the seconds until a token is free."""

    async def acquire(self, key: str, rate: Rate) -> float:
        """Take a token, or report how long to wait for one."""
        ...


class MemoryRateLimiter:
    """Buckets in this process (embedded mode).

    A bucket that has refilled is the same as no bucket: such buckets are dropped once there are
    more than ``max_idle_buckets``, so keys that each come once (a service acting for many
    users, one JWT subject after another) do not grow the process's memory for good."""

    def __init__(self, max_idle_buckets: int = 10_000) -> None:
        # key -> (tokens, when they were counted, when the bucket is full again)
        self._buckets: dict[str, tuple[float, float, float]] = {}
        self._max_idle = max_idle_buckets
        self._sweep_at = max_idle_buckets

    async def acquire(self, key: str, rate: Rate) -> float:
        """Take a token from ``key``."""
        now = time.monotonic()
        tokens, updated, _ = self._buckets.get(key, (float(rate.burst), now, now))
        tokens = min(rate.burst, tokens + (now - updated) * rate.per_second)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / rate.per_second
        self._buckets[key] = (tokens, now, now + (rate.burst - tokens) / rate.per_second)
        if len(self._buckets) > self._sweep_at:
            self._sweep(now)
        return wait

    def _sweep(self, now: float) -> None:
        # Amortised: the next sweep waits until the dictionary has doubled past what is left.
        self._buckets = {key: bucket for key, bucket in self._buckets.items() if bucket[2] > now}
        self._sweep_at = max(self._max_idle, 2 * len(self._buckets))


# One round trip, atomic: refill by elapsed time (Redis clock, so replicas agree), then take.
_BUCKET_SCRIPT = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now = redis.call('TIME')
local now_s = tonumber(now[1]) + tonumber(now[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
local tokens = tonumber(state[1]) or burst
local updated = tonumber(state[2]) or now_s
tokens = math.min(burst, tokens + math.max(0, now_s - updated) * rate)
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'updated', tostring(now_s))
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 1)
return tostring(wait)
"""


class RedisRateLimiter:
    """Buckets in Redis, shared by every replica. Fails open when Redis is unreachable."""

    def __init__(self, url: str, *, prefix: str = "") -> None:
        self._redis: Redis = Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        self._script = self._redis.register_script(_BUCKET_SCRIPT)
        self._prefix = prefix + "ratelimit:"

    async def acquire(self, key: str, rate: Rate) -> float:
        """Take a token from ``key``."""
        try:
            wait = await self._script(keys=[self._prefix + key], args=[rate.per_second, rate.burst])
        except (RedisError, OSError):
            # Limits protect capacity; refusing every call while Redis is down would turn a bus
            # outage into a full outage, so the limiter lets calls through until Redis is back.
            return 0.0
        return float(wait)

    async def close(self) -> None:
        """Close the connection pool."""
        await self._redis.aclose()


async def enforce(limiter: RateLimiter, key: str, rate: Rate | None, what: str) -> None:
    """Raise 429 ``RATE_LIMITED`` with ``Retry-After`` when ``key`` has no token left."""
    if rate is None:
        return
    wait = await limiter.acquire(key, rate)
    if wait > 0:
        raise RateLimited(
            f"Rate limit for {what} exceeded; retry in {wait:.1f} s.",
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
            extra={"retry_after_seconds": round(wait, 3)},
        )
