"""The Redis Streams bus's administration of a channel's consumer groups and of its length by age
(:class:`conclave.platform.bus.redis_streams.RedisStreamsBus` inherits it)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from conclave.platform.errors import BusUnavailable

_MOST_GROUPS = 1000
"""Groups of a channel looked at, at most."""


class StreamGroups:
    """Consumer groups named by a prefix: listed, dropped when idle, dropped one by one; and
    trimming a channel by the age of its entries."""

    _redis: Redis

    def key(self, channel: str) -> str:
        raise NotImplementedError

    async def group_names(self, channel: str, prefix: str) -> list[str]:
        """``XINFO GROUPS``, the names starting with ``prefix``."""
        try:
            groups: Any = await self._redis.xinfo_groups(self.key(channel))
        except ResponseError:
            return []  # no such stream
        except (RedisError, OSError) as exc:
            raise BusUnavailable("The bus (Redis) is not reachable.") from exc
        names = []
        for info in groups[:_MOST_GROUPS]:
            name = info.get("name")
            name = name.decode() if isinstance(name, bytes) else str(name)
            if name.startswith(prefix):
                names.append(name)
        return names

    async def drop_idle_groups(self, channel: str, prefix: str, idle_seconds: float) -> int:
        """:meth:`group_names`, then ``XINFO CONSUMERS`` of each: a group with consumers that all
        idle longer than ``idle_seconds`` is destroyed. From Redis 7.2 a live consumer's
        ``idle`` restarts at each read; before, only at a read that delivered something, so a
        live group on a silent stream may go too, and its consumer makes it again at its next
        read. At most 1,000 groups are looked at."""
        key = self.key(channel)
        dropped = 0
        try:
            for name in await self.group_names(channel, prefix):
                consumers: Any = await self._redis.xinfo_consumers(key, name)
                idle_ms = [int(consumer.get("idle", 0)) for consumer in consumers]
                if idle_ms and min(idle_ms) > idle_seconds * 1000:
                    await self._redis.xgroup_destroy(key, name)
                    dropped += 1
        except ResponseError:
            return 0  # the stream went away meanwhile
        except (RedisError, OSError) as exc:
            raise BusUnavailable("The bus (Redis) is not reachable.") from exc
        return dropped

    async def drop_group(self, channel: str, group: str) -> None:
        """XGROUP DESTROY (a consumer still reading would create the group again)."""
        try:
            await self._redis.xgroup_destroy(self.key(channel), group)
        except ResponseError:
            return  # no such stream
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise BusUnavailable("The bus (Redis) is not reachable.") from exc

    async def trim_older_than(self, channel: str, age: timedelta) -> None:
        """``XTRIM MINID ~`` from Redis's ``TIME``: the entry ids Redis gave carry the time (its
        own) it added them."""
        try:
            seconds, microseconds = await self._redis.time()
            now_ms = int(seconds) * 1000 + int(microseconds) // 1000
            minid = f"{max(0, now_ms - int(age.total_seconds() * 1000))}-0"
            await self._redis.xtrim(self.key(channel), minid=minid, approximate=True)
        except (RedisError, OSError) as exc:
            raise BusUnavailable("The bus (Redis) is not reachable.") from exc
