"""A small closed-loop HTTP/1.1 load generator (keep-alive connections, fixed concurrency).

Written on raw asyncio streams on purpose: a full-featured client such as httpx spends more CPU per
request than the servers under test, and on a 2-core machine the client would be what we measure.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field


@dataclass
class LoadResult:
    """Outcome of one load run."""

    requests: int = 0
    errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies)
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000


async def _worker(
    host: str, port: int, request: bytes, deadline: float, result: LoadResult
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            writer.write(request)
            status_line = await reader.readline()
            status = int(status_line.split()[1])
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            result.latencies.append(time.perf_counter() - started)
            result.requests += 1
            result.statuses[status] = result.statuses.get(status, 0) + 1
            if status >= 400:
                result.errors += 1
    finally:
        writer.close()


async def run_load(
    host: str,
    port: int,
    path: str,
    body: dict,
    *,
    concurrency: int,
    seconds: float,
    headers: dict[str, str] | None = None,
) -> LoadResult:
    """POST ``body`` to ``path`` from ``concurrency`` connections for ``seconds``."""
    payload = json.dumps(body).encode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"{extra}Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    result = LoadResult()
    started = time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(
        *(_worker(host, port, request, deadline, result) for _ in range(concurrency))
    )
    result.seconds = time.perf_counter() - started
    return result
