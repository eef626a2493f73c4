"""Redis Streams bus: consumer groups, ack after work, XAUTOCLAIM reclaim, dead-letter, trimming."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from conclave.platform.bus.base import Delivered, Event, Handler, dead_letter_channel, deliver_once
from conclave.platform.bus.dead_letters import (
    CHANNEL,
    LISTED_FIELD_CHARS,
    DeadLetter,
    dead_letter_of,
    is_entry_id,
)
from conclave.platform.bus.entry import (
    DEFAULT_MAX_EVENT_BYTES,
    PublishRefused,
    Refusal,
    bulk,
    encode_entries,
)
from conclave.platform.bus.envelope import MalformedEntry, event_from_entry
from conclave.platform.bus.redis_groups import StreamGroups
from conclave.platform.errors import BusUnavailable

log = logging.getLogger(__name__)

_READ_BLOCK_MS = 1000
_READ_COUNT = 64


# Adds a batch of entries with one command, so a publish reads one reply instead of one per
# event (through redis-py each reply cost about as much as packing its entry). ``pcall``: an entry
# that fails (its key holds something else than a stream) does not stop the others, as separate
# XADDs would not; the reply lists every failed entry as its position (1-based) and error, an
# empty array when all were added. KEYS: one stream per entry; ARGV: MAXLEN, then per entry its
# number of field and value strings followed by them.
PUBLISH_SCRIPT = b"""
local maxlen, at, failed = ARGV[1], 2, {}
for k = 1, #KEYS do
  local count = tonumber(ARGV[at])
  local command = {'XADD', KEYS[k], 'MAXLEN', '~', maxlen, '*'}
  for j = 1, count do command[6 + j] = ARGV[at + j] end
  at = at + count + 1
  local reply = redis.pcall(unpack(command))
  if type(reply) == 'table' and reply.err then
    failed[#failed + 1] = k
    failed[#failed + 1] = reply.err
  end
end
return failed
"""

# Error replies that mean the server takes no write from us right now (out of memory, loading,
# a replica, failing to persist, an ACL refusing the command...): an outage of the bus, not the
# fault of an entry. Inside the script they arrive as text; for the whole command redis-py raises
# its own classes for some of them.
_OUTAGE_REPLIES = (
    "OOM",
    "LOADING",
    "BUSY",
    "READONLY",
    "MASTERDOWN",
    "MISCONF",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "NOREPLICAS",
    "NOPERM",
)
_OUTAGE_ERRORS = (
    OutOfMemoryError,
    ReadOnlyError,
    TryAgainError,
    ClusterDownError,
    MasterDownError,
    NoPermissionError,
)


def publish_command(entries: Sequence[tuple[bytes, list[bytes]]], maxlen: int) -> bytes:
    """``EVAL`` of :data:`PUBLISH_SCRIPT` for ``(stream key, encoded entry)`` pairs (the entries
    from :func:`~conclave.platform.bus.entry.encode_entry`), in the Redis protocol: an array of
    bulk strings, each prefixed by its length, so any content is sent as it is."""
    parts = [bulk(b"EVAL"), bulk(PUBLISH_SCRIPT), bulk(b"%d" % len(entries))]
    parts += [bulk(key) for key, _ in entries]
    parts.append(bulk(b"%d" % maxlen))
    count = 3 + len(entries) + 1
    for _, fields in entries:
        parts.append(bulk(b"%d" % len(fields)))
        parts += fields
        count += 1 + len(fields)
    return b"*%d\r\n" % count + b"".join(parts)


_SCAN_PAGES = 100
# XRANGE with every field name and value cut at ARGV[2] characters, and whether any was:
# {id, {field, value, ...}, cut}. Run by Redis, so a listing moves at most that much per field.
_LIST_CUT = """
local entries = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', tonumber(ARGV[1]))
local limit = tonumber(ARGV[2])
local out = {}
for i, entry in ipairs(entries) do
  local fields, cut = {}, 0
  for j, item in ipairs(entry[2]) do
    if j > 128 then cut = 1 break end
    if #item > limit then item = string.sub(item, 1, limit) cut = 1 end
    fields[j] = item
  end
  out[i] = {entry[1], fields, cut}
end
return out
"""


def _glob_escaped(text: str) -> str:
    """``text`` matched literally in a Redis ``MATCH`` pattern."""
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


class RedisStreamsBus(StreamGroups):
    """The production bus. The stream key of a channel is ``<prefix><channel>``."""

    def __init__(
        self,
        url: str,
        *,
        stream_prefix: str = "",
        maxlen: int = 100_000,
        max_deliveries: int = 5,
        claim_idle_seconds: float = 60.0,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._redis: Redis = Redis.from_url(
            url,
            decode_responses=True,
            # Anyone who can write to a stream can write bytes that are not UTF-8: strict decoding
            # would fail the whole read (stopping the consumer on that entry for good). Decoded
            # with surrogate escapes, such an entry is refused as unsafe (event_from_entry) and
            # dead-lettered with its bytes as they were.
            encoding_errors="surrogateescape",
            socket_connect_timeout=2,
            socket_timeout=(_READ_BLOCK_MS / 1000) + 5,
            health_check_interval=15,
        )
        self._prefix = stream_prefix
        self._maxlen = maxlen
        self._max_deliveries = max_deliveries
        self._claim_idle_ms = int(claim_idle_seconds * 1000)
        self._max_event_bytes = max_event_bytes

    def key(self, channel: str) -> str:
        """The Redis key of ``channel``'s stream."""
        return self._prefix + channel

    async def publish(self, events: Sequence[Event]) -> None:
        """Add every event to its stream in one round trip and one command, trimming each stream
        approximately to ``maxlen``.

        The command is packed here (:func:`publish_command`) and sent on a connection of redis-py's
        pool, whose parser reads the reply: redis-py's generic pipeline took several times the
        CPU per event, a large share of a governed gateway call (docs/benchmarks.md). An event
        that cannot be encoded is left out and one Redis refuses does not stop the others: both
        raise :class:`PublishRefused` once the others are added. Raises :class:`BusUnavailable` when
        Redis cannot be reached or takes no writes (nothing is known to be added then).
        """
        if not events:
            return
        encoded, refusals = encode_entries(events, self._max_event_bytes)
        # A channel that is not UTF-8 was refused with its entry (the channel is one of its fields).
        entries = [(self.key(event.channel).encode(), entry) for event, entry in encoded]
        sent = [event for event, _entry in encoded]
        if entries:
            failed = await self._send(publish_command(entries, self._maxlen))
            for position, error in zip(failed[::2], failed[1::2], strict=True):
                if str(error).startswith(_OUTAGE_REPLIES):
                    raise BusUnavailable(f"The bus (Redis) takes no writes: {error}")
                refusals.append(
                    Refusal(sent[int(position) - 1].event_id, str(error), lasting=False)
                )
        if refusals:
            raise PublishRefused(refusals)

    async def _send(self, packed: bytes) -> Any:
        pool = self._redis.connection_pool
        try:
            connection = await pool.get_connection()  # type: ignore[no-untyped-call]
            try:
                await connection.send_packed_command(packed)
                return await connection.read_response()  # raises an error reply
            except BaseException:
                # A reply may be left unread: the connection must not be reused as it is.
                await connection.disconnect()
                raise
            finally:
                await pool.release(connection)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise BusUnavailable("The bus (Redis) is not reachable.") from exc
        except ResponseError as exc:
            if isinstance(exc, _OUTAGE_ERRORS) or str(exc).startswith(_OUTAGE_REPLIES):
                raise BusUnavailable(f"The bus (Redis) takes no writes: {exc}") from exc
            raise

    async def ping(self) -> None:
        """PING Redis."""
        try:
            await self._redis.ping()
        except (RedisError, OSError) as exc:
            raise BusUnavailable("The bus (Redis) is not reachable.") from exc

    async def read(self, channel: str, count: int = 100) -> list[Event]:
        """The newest ``count`` events of ``channel``, oldest first."""
        entries: Any = await self._redis.xrevrange(self.key(channel), count=count)
        return [
            event_from_entry(fields, entry_id=entry_id, channel=channel)
            for entry_id, fields in reversed(entries)
        ]

    async def consumer_lag(self, channel: str, group: str) -> int | None:
        """``XINFO GROUPS``: the group's ``lag`` (entries not delivered yet; Redis 7) plus its
        ``pending``; ``None`` when the group does not exist or Redis cannot tell the lag (after
        deletions in the stream, Redis 7 reports it unknown)."""
        try:
            groups: Any = await self._redis.xinfo_groups(self.key(channel))
        except ResponseError:
            return None  # no such stream
        except (RedisError, OSError) as exc:
            raise BusUnavailable("The bus (Redis) is not reachable.") from exc
        for info in groups:
            if info.get("name") == group:
                lag = info.get("lag")
                return None if lag is None else int(lag) + int(info.get("pending", 0))
        return None

    async def dead_letter_channels(self, limit: int = 100) -> list[str]:
        """Channels whose dead-letter stream holds entries, by name: found by ``SCAN`` (at most
        :data:`_SCAN_PAGES` pages of 1,000 keys, whatever the keyspace holds), then ``XLEN``.
        A name with a ``:`` after this deployment's prefix belongs to another deployment whose
        prefix extends this one's (the default prefix is empty): it is not listed."""
        suffix = dead_letter_channel("")
        pattern = _glob_escaped(self._prefix) + "*" + _glob_escaped(suffix)
        found: set[str] = set()
        try:
            cursor: Any = 0
            for _ in range(_SCAN_PAGES):
                cursor, keys = await self._redis.scan(
                    cursor, match=pattern, count=1000, _type="stream"
                )
                for key in keys:
                    name = str(key)[len(self._prefix) : -len(suffix)]  # decoded: a str
                    if CHANNEL.fullmatch(name):
                        found.add(name)
                if not cursor or len(found) >= 10 * limit:
                    break
            # A stream emptied by discards or replays stays as a key: only those with entries.
            names = sorted(found)
            lengths = [await self._redis.xlen(self.key(dead_letter_channel(n))) for n in names]
        except (RedisError, OSError) as exc:
            raise BusUnavailable("The bus (Redis) is not reachable.") from exc
        return [name for name, length in zip(names, lengths, strict=True) if length][:limit]

    async def dead_letters(self, channel: str, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` entries of ``channel``'s dead-letter stream, each field cut at
        :data:`LISTED_FIELD_CHARS` by Redis itself (a script): a listing never moves a whole
        8 MB event, nor parses one (``dead_letter`` reads one whole, to replay it)."""
        try:
            entries: Any = await self._redis.eval(
                _LIST_CUT, 1, self.key(dead_letter_channel(channel)), limit, LISTED_FIELD_CHARS
            )
        except (RedisError, OSError) as exc:
            raise BusUnavailable("The bus (Redis) is not reachable.") from exc
        letters = []
        for entry_id, flat, cut in entries:
            fields = dict(zip(flat[::2], flat[1::2], strict=True))
            letters.append(dead_letter_of(channel, entry_id, fields, cut=bool(cut)))
        return letters

    async def dead_letter(self, channel: str, entry_id: str) -> DeadLetter | None:
        """One dead-letter entry, whole (``XRANGE`` from and to its id), or ``None``."""
        if not is_entry_id(entry_id):
            return None  # Redis would refuse it as no id at all
        try:
            entries: Any = await self._redis.xrange(
                self.key(dead_letter_channel(channel)), min=entry_id, max=entry_id, count=1
            )
        except (RedisError, OSError) as exc:
            raise BusUnavailable("The bus (Redis) is not reachable.") from exc
        return dead_letter_of(channel, *entries[0]) if entries else None

    async def remove_dead_letter(self, channel: str, entry_id: str) -> bool:
        """``XDEL`` one dead-letter entry; whether it was there."""
        if not is_entry_id(entry_id):
            return False
        try:
            removed = await self._redis.xdel(self.key(dead_letter_channel(channel)), entry_id)
        except (RedisError, OSError) as exc:
            raise BusUnavailable("The bus (Redis) is not reachable.") from exc
        return bool(removed)

    async def close(self) -> None:
        """Close the connection pool."""
        await self._redis.aclose()

    async def consume(
        self, channel: str, group: str, consumer: str, handler: Handler, *, start: str = "$"
    ) -> None:
        """Deliver ``channel``'s events to ``handler`` until cancelled; survives Redis restarts."""
        key = self.key(channel)
        backoff = 0.2
        # Drain our own pending entries first (a restart after a crash), then read new ones.
        cursor = "0"
        last_claim = 0.0
        task = asyncio.current_task()
        while True:
            if task is not None and task.cancelling():
                # A cancellation that lands while redis-py runs a command is sometimes swallowed
                # (the command then returns normally); honour it here, or shutdown waits forever.
                raise asyncio.CancelledError
            try:
                await self._ensure_group(key, group, start)
                if time.monotonic() - last_claim > self._claim_idle_ms / 4000:
                    last_claim = time.monotonic()
                    await self._reclaim(channel, group, consumer, handler)
                reply: Any = await self._redis.xreadgroup(
                    group, consumer, {key: cursor}, count=_READ_COUNT, block=_READ_BLOCK_MS
                )
                entries = reply[0][1] if reply else []
                handled = await self._deliver(
                    channel, group, consumer, handler, entries, check_deliveries=cursor == "0"
                )
                if not handled:  # a dependency of the handler is down: wait, then retry ours
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    cursor = "0"
                    continue
                # Our own pending entries are handled once; what fails again waits for XAUTOCLAIM.
                cursor = ">"
                backoff = 0.2
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                log.warning("bus consumer waiting for Redis", extra={"error": str(exc)})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                cursor = "0"

    async def _ensure_group(self, key: str, group: str, start: str) -> None:
        try:
            await self._redis.xgroup_create(key, group, id=start, mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _reclaim(self, channel: str, group: str, consumer: str, handler: Handler) -> None:
        key = self.key(channel)
        start_id = "0-0"
        while True:
            reply = await self._redis.xautoclaim(
                key, group, consumer, self._claim_idle_ms, start_id=start_id, count=_READ_COUNT
            )
            start_id, entries = reply[0], reply[1]
            if entries and not await self._deliver(
                channel, group, consumer, handler, entries, check_deliveries=True
            ):
                return  # a dependency is down: the consume loop backs off
            if start_id == "0-0" or not entries:
                return

    async def _deliver(
        self,
        channel: str,
        group: str,
        consumer: str,
        handler: Handler,
        entries: list[Any],
        *,
        check_deliveries: bool,
    ) -> bool:
        """Handle ``entries``; False when the handler found a dependency down (the entries not
        handled stay pending, their deliveries uncounted)."""
        key = self.key(channel)
        counts: dict[str, int] = {}
        if check_deliveries and entries:
            counts = await self._deliveries(key, group, entries)
        for index, (entry_id, fields) in enumerate(entries):
            if fields is None:  # deleted by trimming while pending: nothing left to handle
                await self._redis.xack(key, group, entry_id)
                continue
            if counts.get(entry_id, 1) > self._max_deliveries:
                await self._dead_letter(key, group, entry_id, fields, "too many deliveries")
                continue
            try:
                size = sum(len(name) + len(value) for name, value in fields.items())
                if size > self._max_event_bytes:  # not parsed on the event loop: refused
                    raise MalformedEntry(f"entry of about {size} bytes exceeds the bus's limit")
                event = event_from_entry(fields, entry_id=entry_id, channel=channel)
                if event.channel != channel:  # handlers trust the channel they consume
                    raise MalformedEntry(f"its channel field names another channel than {key!r}")
            except MalformedEntry as exc:
                await self._dead_letter(key, group, entry_id, fields, f"malformed entry: {exc}")
                continue
            outcome, reason = await deliver_once(handler, event, {"stream": key})
            if outcome is Delivered.REJECTED:
                await self._dead_letter(key, group, entry_id, fields, reason)
            elif outcome is Delivered.WAITING:
                await self._uncount(key, group, consumer, entries[index:])
                return False
            elif outcome is Delivered.HANDLED:
                await self._redis.xack(key, group, entry_id)
            # FAILED: left pending, reclaimed and redelivered after the idle time
        return True

    async def _deliveries(self, key: str, group: str, entries: list[Any]) -> dict[str, int]:
        pending: Any = await self._redis.xpending_range(
            key, group, min=entries[0][0], max=entries[-1][0], count=len(entries)
        )
        return {p["message_id"]: p["times_delivered"] for p in pending}

    async def _uncount(self, key: str, group: str, consumer: str, entries: list[Any]) -> None:
        # XCLAIM with RETRYCOUNT sets an entry's delivery counter: take back this delivery.
        counts = await self._deliveries(key, group, entries)
        for entry_id, _fields in entries:
            delivered = counts.get(entry_id)
            if delivered is not None:
                await self._redis.xclaim(
                    key,
                    group,
                    consumer,
                    0,
                    [entry_id],
                    retrycount=max(delivered - 1, 0),
                    justid=True,
                )

    async def _dead_letter(
        self, key: str, group: str, entry_id: str, fields: dict[str, str], reason: str
    ) -> None:
        log.error("moving entry to dead-letter stream", extra={"stream": key, "reason": reason})
        dead: Any = {**fields, "dlq_reason": reason, "dlq_group": group, "dlq_entry_id": entry_id}
        await self._redis.xadd(
            dead_letter_channel(key), dead, maxlen=self._maxlen, approximate=True
        )
        await self._redis.xack(key, group, entry_id)
