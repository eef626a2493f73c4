"""Load test: all four services together at steady open-loop rates, with their memory over time.

Run: ``.venv/bin/python -m bench.load [--seconds 60] [--warmup 5] [--rate NAME=PER_SECOND ...]``

Every service is a subprocess in production mode (`conclave serve gateway|collector|graph|edge`)
on a throw-away PostgreSQL database and Redis stream prefix, wired to each other as in a
deployment: the graph asks the collector, the collector's bridge turns every upload into an
``evidence_ingest`` expedition. The client, in this process, sends each endpoint's requests at a
fixed rate whatever the answers do (open loop: a slow server meets the same arrivals, and a
request's latency counts from when it was due, so queueing is measured rather than hidden).

Reported per endpoint: sent and completed requests, achieved rate against the target, p50/p99/max
latency, errors (HTTP >= 400, connection failures, time-outs). Per service: resident memory (RSS
of the process and its children, e.g. the edge's parser workers) sampled from ``/proc`` during the
measured window, and a verdict. After the load, how long the collector took to turn every upload
into a record.

Memory rule: the measured window is cut into thirds; the first third is warm-up (imports finished
lazily, connection pools, caches and allocator arenas filling). A service **grows** when the mean
RSS of the last third exceeds the mean of the second third by more than 5 %, otherwise it is
**flat**. The slope over the last two thirds is printed as well. One minute only catches fast
leaks; run longer (``--seconds 600``) before calling a slow one absent.

Other code can run it: ``result = await run_load_test(LoadConfig(seconds=30))``, then
``result.render()`` or ``result.as_dict()``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

from bench.loadgen import LoadResult
from bench.servers import Scratch, free_port, scratch_stores, start_process, wait_ready

SERVICES = ("gateway", "collector", "graph", "edge")
DEFAULT_RATES = {
    "gateway.execute": 30.0,
    "graph.dispatch": 8.0,
    "edge.upload_document": 2.0,
    "edge.upload_image": 2.0,
    "collector.run": 1.0,
    "collector.status": 10.0,
}
GROWTH_LIMIT = 0.05
REQUEST_TIMEOUT = 30.0


@dataclass
class LoadConfig:
    """What to run: the measured time, a warm-up before it, the rate of each endpoint."""

    seconds: float = 60.0
    warmup_seconds: float = 5.0
    rates: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_RATES))
    sample_seconds: float = 1.0
    drain_seconds: float = 120.0
    connections_per_endpoint: int = 64


@dataclass
class EndpointResult:
    """Figures of one endpoint over the measured window."""

    name: str
    target_rate: float
    sent: int
    completed: int
    achieved_rate: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    statuses: dict[str, int]

    @property
    def ratio(self) -> float:
        """Achieved rate over the target (1.0: the endpoint kept up)."""
        return self.achieved_rate / self.target_rate if self.target_rate else 0.0


@dataclass
class MemoryResult:
    """Resident memory of one service (process and children) over the measured window."""

    service: str
    samples_mib: list[float]
    first_third_mib: float
    second_third_mib: float
    last_third_mib: float
    max_mib: float
    slope_mib_per_min: float
    growth: float
    verdict: str
    exit_code: int | None


@dataclass
class LoadTestResult:
    """Everything one load test measured."""

    started_at: str
    seconds: float
    warmup_seconds: float
    cpus: int
    endpoints: list[EndpointResult]
    memory: list[MemoryResult]
    uploads: int
    ingested: int
    drain_seconds: float | None

    @property
    def memory_flat(self) -> bool:
        """Whether every service's memory stayed flat (and every service stayed up)."""
        return all(m.verdict == "flat" for m in self.memory)

    def as_dict(self) -> dict[str, Any]:
        """The result as plain data (JSON-ready)."""
        return asdict(self)

    def render(self) -> str:
        """The report as Markdown tables."""
        out = io.StringIO()
        out.write(
            f"load test: {self.seconds:g} s measured after {self.warmup_seconds:g} s warm-up, "
            f"open loop, 4 services as subprocesses (PostgreSQL + Redis), {self.cpus} CPUs, "
            f"{self.started_at}\n"
        )
        out.write(
            "| endpoint | target /s | achieved /s | ratio | sent | p50 ms | p99 ms | max ms "
            "| errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        )
        for e in self.endpoints:
            out.write(
                f"| {e.name} | {e.target_rate:g} | {e.achieved_rate:.2f} | {e.ratio:.2f} "
                f"| {e.sent} | {e.p50_ms:.1f} | {e.p99_ms:.1f} | {e.max_ms:.1f} | {e.errors} |\n"
            )
        out.write(
            "\n| service | RSS 1st third MiB | 2nd third | last third | max | slope MiB/min "
            "| last/2nd | verdict |\n|---|---:|---:|---:|---:|---:|---:|---|\n"
        )
        for m in self.memory:
            out.write(
                f"| {m.service} | {m.first_third_mib:.1f} | {m.second_third_mib:.1f} "
                f"| {m.last_third_mib:.1f} | {m.max_mib:.1f} | {m.slope_mib_per_min:+.2f} "
                f"| {1 + m.growth:.3f} | {m.verdict} |\n"
            )
        drained = f"in {self.drain_seconds:.1f} s" if self.drain_seconds is not None else "not all"
        out.write(
            f"\nuploads → evidence records: {self.ingested} of {self.uploads} ingested "
            f"({drained} after the load stopped)\n"
            f"memory: {'flat' if self.memory_flat else 'NOT flat'} "
            f"(grows = last-third mean > second-third mean by more than {GROWTH_LIMIT:.0%})\n"
        )
        return out.getvalue()


# --- a small open-loop HTTP/1.1 client on raw asyncio streams (see bench/loadgen.py for why) ---


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("connection closed")
    status = int(status_line.split()[1])
    length, chunked, keep_alive = 0, False, True
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
        elif name == b"connection" and b"close" in value.lower():
            keep_alive = False
    if not chunked:
        return status, await reader.readexactly(length), keep_alive
    body = bytearray()
    while size := int((await reader.readline()).split(b";")[0], 16):
        body += await reader.readexactly(size)
        await reader.readexactly(2)
    await reader.readline()
    return status, bytes(body), keep_alive


# uvicorn closes a keep-alive connection idle for 5 s; one idle that long is not reused, so a
# request never races the server's close (which would count as an error of the server).
_IDLE_REUSE_SECONDS = 4.0


class _ConnectionPool:
    """Keep-alive connections to one server; a request takes an idle one or opens another, up
    to ``limit`` (beyond it requests wait, and that wait counts in their latency)."""

    def __init__(self, port: int, limit: int) -> None:
        self.port = port
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[tuple[float, asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        now = time.monotonic()
        while self._idle:
            since, reader, writer = self._idle.pop()
            if now - since < _IDLE_REUSE_SECONDS:
                return reader, writer
            writer.close()
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        async with self._slots:
            reader, writer = await self._connection()
            try:
                writer.write(request)
                status, body, keep_alive = await _read_response(reader)
            except BaseException:
                writer.close()
                raise
            if keep_alive:
                self._idle.append((time.monotonic(), reader, writer))
            else:
                writer.close()
            return status, body

    def close(self) -> None:
        for _, _, writer in self._idle:
            writer.close()
        self._idle.clear()


def _request(method: str, port: int, path: str, body: bytes = b"", kind: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    if kind:
        head += f"Content-Type: {kind}\r\n"
    if method != "GET":
        head += f"Content-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


def _json_request(port: int, path: str, payload: dict[str, Any]) -> bytes:
    return _request("POST", port, path, json.dumps(payload).encode(), "application/json")


def _multipart_request(port: int, path: str, filename: str, content: bytes, kind: str) -> bytes:
    boundary = uuid.uuid4().hex
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        f"Content-Type: {kind}\r\n\r\n"
    ).encode() + content
    body += (
        f'\r\n--{boundary}\r\nContent-Disposition: form-data; name="metadata"\r\n\r\n'
        f'{{"source": "load test"}}\r\n--{boundary}--\r\n'
    ).encode()
    return _request("POST", port, path, body, f"multipart/form-data; boundary={boundary}")


@dataclass
class _Endpoint:
    name: str
    service: str
    build: Callable[[int], bytes | None]  # the n-th request; None: nothing to ask yet
    on_answer: Callable[[int, bytes], None] | None = None


@dataclass
class _Tally:
    result: LoadResult = field(default_factory=LoadResult)
    sent: int = 0


def _pngs(count: int) -> list[bytes]:
    images = []
    for index in range(count):
        buffer = io.BytesIO()
        colour = ((index * 37) % 256, (index * 91) % 256, (index * 53) % 256)
        Image.new("RGB", (64 + index, 48), colour).save(buffer, format="PNG")
        images.append(buffer.getvalue())
    return images


class _Workload:
    """The requests of each endpoint, and what the answers teach (expedition and evidence ids)."""

    def __init__(self, ports: dict[str, int], source: Path) -> None:
        self.ports = ports
        self.source = source
        self.expeditions: list[str] = []
        self.evidence: set[str] = set()
        self._pngs = _pngs(16)
        self._words = ["harbour", "crane", "survey", "bridge", "river", "dam", "north", "field"]

    def endpoints(self) -> dict[str, _Endpoint]:
        return {
            "gateway.execute": _Endpoint("gateway POST /execute", "gateway", self._execute),
            "graph.dispatch": _Endpoint("graph POST /dispatch", "graph", self._dispatch),
            "edge.upload_document": _Endpoint(
                "edge POST /api/edge-intake/document (text)",
                "edge",
                self._document,
                self._uploaded,
            ),
            "edge.upload_image": _Endpoint(
                "edge POST /api/edge-intake/image (PNG)", "edge", self._image, self._uploaded
            ),
            "collector.run": _Endpoint(
                "collector POST /expedition/run", "collector", self._run, self._accepted
            ),
            "collector.status": _Endpoint(
                "collector GET /expedition/status/{id}", "collector", self._status
            ),
        }

    def _execute(self, n: int) -> bytes:
        expression = f"{n % 97} * 3 + sqrt({(n % 50) ** 2})"
        return _json_request(
            self.ports["gateway"],
            "/execute",
            {"tool": "evaluate_expression", "args": {"expression": expression}},
        )

    def _dispatch(self, n: int) -> bytes:
        words = self._words
        query = f"compare the {words[n % 8]} {words[(n * 3) % 8]} inspection reports"
        return _json_request(
            self.ports["graph"],
            "/dispatch",
            {"query": query, "validated_entities": [f"{words[n % 8]}-{n % 5}"]},
        )

    def _document(self, n: int) -> bytes:
        text = f"Load test report {n}: {self._words[n % 8]} inspection {uuid.uuid4()}\n" * 20
        return _multipart_request(
            self.ports["edge"], "/api/edge-intake/document", f"report-{n}.txt",
            text.encode(), "text/plain",
        )  # fmt: skip

    def _image(self, n: int) -> bytes:
        return _multipart_request(
            self.ports["edge"], "/api/edge-intake/image", f"frame-{n}.png",
            self._pngs[n % len(self._pngs)], "image/png",
        )  # fmt: skip

    def _uploaded(self, status: int, body: bytes) -> None:
        if status == 200:
            answer = json.loads(body)
            if answer.get("status") == "created":
                self.evidence.update(answer["evidence_ids"])

    def _run(self, _n: int) -> bytes:
        return _json_request(
            self.ports["collector"],
            "/expedition/run",
            {
                "expedition_type": "discovery",
                "target_collections": ["load"],
                "parameters": {
                    "sources": [{"type": "file", "path": str(self.source), "key": "id"}]
                },
            },
        )

    def _accepted(self, status: int, body: bytes) -> None:
        if status == 202:
            self.expeditions.append(json.loads(body)["expedition_id"])

    def _status(self, n: int) -> bytes | None:
        if not self.expeditions:
            return None
        # Mostly recent expeditions (what a caller polls), sometimes an older one.
        recent = self.expeditions[-20:]
        chosen = recent[n % len(recent)] if n % 4 else random.choice(self.expeditions)
        return _request("GET", self.ports["collector"], f"/expedition/status/{chosen}")


async def _drive(
    endpoint: _Endpoint,
    pool: _ConnectionPool,
    rate: float,
    start: float,
    measure_from: float,
    stop: float,
    tally: _Tally,
) -> None:
    """Send ``endpoint``'s requests every ``1/rate`` s from ``start`` to ``stop``; only those due
    after ``measure_from`` count."""
    loop = asyncio.get_running_loop()
    interval = 1.0 / rate
    in_flight: set[asyncio.Task[None]] = set()

    async def one(n: int, due: float, counted: bool) -> None:
        request = endpoint.build(n)
        if request is None:
            return
        result = tally.result
        if counted:
            tally.sent += 1
        try:
            status, body = await asyncio.wait_for(pool.exchange(request), REQUEST_TIMEOUT)
        except (OSError, ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            status, body = 0, b""
        if endpoint.on_answer is not None:
            endpoint.on_answer(status, body)
        if not counted:
            return
        result.requests += 1
        result.latencies.append(loop.time() - due)
        result.statuses[status] = result.statuses.get(status, 0) + 1
        if status == 0 or status >= 400:
            result.errors += 1

    for n in itertools.count():
        due = start + n * interval
        if due >= stop:
            break
        if (delay := due - loop.time()) > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(n, due, due >= measure_from))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    if in_flight:
        await asyncio.gather(*in_flight)


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def _process_tree(root: int) -> list[int]:
    """``root`` and every descendant (from the parent ids in ``/proc/*/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # The command name is in parentheses and may hold spaces: split after it.
                fields = stat.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    tree, queue = [], [root]
    while queue:
        pid = queue.pop()
        tree.append(pid)
        queue.extend(children.get(pid, ()))
    return tree


async def _sample_memory(
    pids: dict[str, int], every: float, samples: dict[str, list[float]], stop: asyncio.Event
) -> None:
    while not stop.is_set():
        for service, pid in pids.items():
            total = sum(_rss_kib(p) for p in _process_tree(pid))
            samples[service].append(total / 1024)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)


def _memory_verdict(
    service: str, samples: list[float], every: float, exit_code: int | None
) -> MemoryResult:
    third = max(1, len(samples) // 3)
    first, second, last = samples[:third], samples[third : 2 * third], samples[2 * third :]
    mean = statistics.fmean
    second_mean, last_mean = mean(second or samples), mean(last or samples)
    growth = (last_mean - second_mean) / second_mean if second_mean else 0.0
    tail = samples[third:]
    slope = 0.0
    if len(tail) >= 2:
        slope = statistics.linear_regression(range(len(tail)), tail).slope * 60 / every
    verdict = "flat" if growth <= GROWTH_LIMIT else "grows"
    if exit_code is not None:
        verdict = f"exited ({exit_code})"
    return MemoryResult(
        service=service,
        samples_mib=[round(s, 1) for s in samples],
        first_third_mib=mean(first or samples),
        second_third_mib=second_mean,
        last_third_mib=last_mean,
        max_mib=max(samples),
        slope_mib_per_min=slope,
        growth=growth,
        verdict=verdict,
        exit_code=exit_code,
    )


def _percentile_ms(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000 if ordered else 0.0


def _environment(stores: Scratch, data_dir: Path, **extra: str) -> dict[str, str]:
    return {
        **stores.env(),
        "CONCLAVE_AUTH": "disabled",
        "CONCLAVE_LOG_LEVEL": "WARNING",
        "CONCLAVE_DATA_DIR": str(data_dir),
        **extra,
    }


async def _ingested(collector_port: int, expected: set[str], limit: float) -> tuple[int, float]:
    """How many of ``expected`` evidence ids are records, waiting up to ``limit`` seconds for all
    of them; and how long that took."""
    started = time.perf_counter()
    count = 0
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{collector_port}", timeout=30) as c:
        while True:
            listing = (await c.get("/collections")).json()["collections"]
            count = next((x["records"] for x in listing if x["name"] == "evidence"), 0)
            elapsed = time.perf_counter() - started
            if count >= len(expected) or elapsed > limit:
                return count, elapsed
            await asyncio.sleep(0.5)


async def run_load_test(config: LoadConfig | None = None) -> LoadTestResult:
    """Start the four services, load them for ``config.seconds`` (after the warm-up), sample
    their memory, stop them, and return the figures. Cleans its database and streams up."""
    config = config or LoadConfig()
    unknown = set(config.rates) - set(DEFAULT_RATES)
    if unknown:
        raise ValueError(f"unknown endpoints {sorted(unknown)}; known: {sorted(DEFAULT_RATES)}")
    folder = Path(tempfile.mkdtemp(prefix="conclave-load-"))
    source = folder / "items.jsonl"
    source.write_text(
        "".join(json.dumps({"id": f"i{i}", "title": f"survey item {i}"}) + "\n" for i in range(20))
    )
    cleanup = AsyncExitStack()
    stores = await cleanup.enter_async_context(scratch_stores("load"))
    cli = [sys.executable, "-m", "conclave.cli.main"]
    ports = {service: free_port() for service in SERVICES}
    urls = {service: f"http://127.0.0.1:{port}" for service, port in ports.items()}
    extra = {
        "gateway": {
            "GATEWAY_COLLECTOR_URL": urls["collector"],
            "GATEWAY_GRAPH_URL": urls["graph"],
            "GATEWAY_EDGE_URL": urls["edge"],
            "GATEWAY_LOAD_ENTRY_POINTS": "false",
        },
        "collector": {
            "COLLECTOR_EDGE_API_BASE": urls["edge"],
            "COLLECTOR_FILE_ROOTS": str(folder),
        },
        "graph": {"GRAPH_COLLECTOR_URL": urls["collector"]},
        "edge": {},
    }
    processes: dict[str, subprocess.Popen[bytes]] = {}
    pools: dict[str, _ConnectionPool] = {}
    started_at = time.strftime("%Y-%m-%d %H:%M")
    try:
        # The first one migrates the new database; the others then start together.
        order = ["edge", "collector", "graph", "gateway"]
        for index, service in enumerate(order):
            env = _environment(stores, folder / service, **extra[service])
            args = [*cli, "serve", service, "--port", str(ports[service])]
            processes[service] = start_process(args, env)
            if index == 0:
                await wait_ready(ports[service], "/health")
        await asyncio.gather(*(wait_ready(ports[s], "/health") for s in order[1:]))

        workload = _Workload(ports, source)
        endpoints = workload.endpoints()
        for name in config.rates:
            pools[name] = _ConnectionPool(
                ports[endpoints[name].service], config.connections_per_endpoint
            )
        # Two requests per endpoint first, not counted: lazy start-up work (the edge's two
        # parser processes, first imports) is not what a steady rate should measure.
        for name, rate in config.rates.items():
            for n in range(2 if rate > 0 else 0):
                request = endpoints[name].build(n)
                if request is not None:
                    status, body = await pools[name].exchange(request)
                    if endpoints[name].on_answer is not None:
                        endpoints[name].on_answer(status, body)
        tallies = {name: _Tally() for name in config.rates}
        samples: dict[str, list[float]] = {service: [] for service in SERVICES}
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.2
        measure_from = start + config.warmup_seconds
        stop = measure_from + config.seconds
        sampling_done = asyncio.Event()

        async def sample_after_warmup() -> None:
            await asyncio.sleep(max(0.0, measure_from - loop.time()))
            pids = {service: process.pid for service, process in processes.items()}
            await _sample_memory(pids, config.sample_seconds, samples, sampling_done)

        sampler = asyncio.create_task(sample_after_warmup())
        drivers = []
        for name, rate in config.rates.items():
            if rate <= 0:
                continue
            drivers.append(
                _drive(endpoints[name], pools[name], rate, start, measure_from, stop, tallies[name])
            )
        await asyncio.gather(*drivers)
        sampling_done.set()
        await sampler

        ingested, drain = await _ingested(
            ports["collector"], workload.evidence, config.drain_seconds
        )
        exit_codes = {service: process.poll() for service, process in processes.items()}
    finally:
        for pool in pools.values():
            pool.close()
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        await cleanup.aclose()

    results = []
    for name, rate in config.rates.items():
        if rate <= 0:
            continue
        tally = tallies[name]
        latencies = tally.result.latencies
        results.append(
            EndpointResult(
                name=endpoints[name].name,
                target_rate=rate,
                sent=tally.sent,
                completed=tally.result.requests,
                achieved_rate=(tally.result.requests - tally.result.errors) / config.seconds,
                p50_ms=_percentile_ms(latencies, 0.50),
                p99_ms=_percentile_ms(latencies, 0.99),
                max_ms=max(latencies, default=0.0) * 1000,
                errors=tally.result.errors,
                statuses={str(k): v for k, v in sorted(tally.result.statuses.items())},
            )
        )
    memory = [
        _memory_verdict(service, samples[service], config.sample_seconds, exit_codes[service])
        for service in SERVICES
        if samples[service]
    ]
    uploads = len(workload.evidence)
    return LoadTestResult(
        started_at=started_at,
        seconds=config.seconds,
        warmup_seconds=config.warmup_seconds,
        cpus=os.cpu_count() or 0,
        endpoints=results,
        memory=memory,
        uploads=uploads,
        ingested=ingested,
        drain_seconds=drain if ingested >= uploads else None,
    )


def _parse_rates(values: list[str]) -> dict[str, float]:
    rates = dict(DEFAULT_RATES)
    for value in values:
        name, sep, number = value.partition("=")
        if not sep or name not in DEFAULT_RATES:
            raise SystemExit(f"--rate takes NAME=PER_SECOND with NAME one of {list(DEFAULT_RATES)}")
        rates[name] = float(number)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="measured time")
    parser.add_argument("--warmup", type=float, default=5.0, help="load before measuring")
    parser.add_argument(
        "--rate",
        action="append",
        default=[],
        metavar="NAME=PER_SECOND",
        help=f"rate of one endpoint (0 turns it off); defaults: {DEFAULT_RATES}",
    )
    parser.add_argument("--sample-seconds", type=float, default=1.0, help="RSS sampling period")
    parser.add_argument("--json", type=Path, help="also write the full result here")
    options = parser.parse_args()
    config = LoadConfig(
        seconds=options.seconds,
        warmup_seconds=options.warmup,
        rates=_parse_rates(options.rate),
        sample_seconds=options.sample_seconds,
    )
    result = asyncio.run(run_load_test(config))
    print(result.render(), end="")
    if options.json:
        options.json.write_text(json.dumps(result.as_dict(), indent=2))


if __name__ == "__main__":
    main()
