"""Edge client: syncing queued files through the ``Outbox`` vs ``EdgeClient.upload`` directly.

Run: ``.venv/bin/python -m bench.edge_client [--items 1000] [--concurrency 1,2] [--rounds 2]``

One ``conclave serve edge`` process (uvicorn, ``CONCLAVE_AUTH=disabled``) runs **embedded**: a
temporary ``CONCLAVE_DATA_DIR`` with the SQLite store, the in-process bus and the blob folder,
default settings otherwise (each blob fsynced before its pack commits, two parser workers).

The files are 64 KiB PNGs (a 250x250 grey image of random pixels, padded to exactly 65,536 bytes
with a ``tEXt`` chunk holding a counter, so every file has its own bytes and the content-addressed
store never takes its already-stored shortcut). PNG is the cheap parser: the image agent checks
the chunk structure and CRCs and reads the header without decompressing pixels.

For each concurrency level, in the same run and against the same server:

- direct: ``items`` files sent with ``EdgeClient.upload`` (a fresh idempotency key each, the
  outbox's ``metadata.device_id``), ``concurrency`` uploads in flight, from a shared work list;
- outbox: ``items`` other files queued with ``Outbox.enqueue_many`` (one transaction, not timed,
  shown apart), then timed: ``Outbox.sync(client, concurrency=concurrency, receipts=False)``,
  the delivery; then, timed apart and printed on its own line, ``Outbox.fetch_receipts``: what a
  sync run with receipts (the default) does once its items are sent (issue 20's receipts are not
  part of issue 4's delivery target, and direct uploads fetch none).

``Outbox.sync`` runs ``concurrency`` workers that each claim an item (one SQLite transaction),
upload it, and mark it SENT (another transaction). The outbox is in WAL mode; enqueue commits with
``synchronous=FULL``, a sync run's claims and outcomes with ``synchronous=NORMAL`` and one
checkpoint (fsync) at the end of the run (with two fsyncs per item, the first version spent
about 6.5 ms per item on them here). The outbox file, the files and the server's data folder are in
the system's temporary folder (on the same disk). Rounds alternate the order
(direct first, then outbox first). Before the timed runs, 20 warm-up uploads start the server's
parser workers and the client's connections.

Checks: every upload answered ``created`` with exactly one evidence id, all ids distinct, the
outbox reports every item SENT with no retry, failure or duplicate, and the server's pipeline
``total_events`` (packs ever created) grew by exactly the number of uploads of each run, with no
new upload errors. CPU: this process (the client) from ``time.process_time``; the server with its
parser workers from ``/proc``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx

from bench.report import target
from bench.servers import ROOT, cpu_seconds, free_port, wait_ready
from conclave.edge_client import EdgeClient, Envelope, Outbox, SyncReport, UploadResult

HOST = "127.0.0.1"
FILE_BYTES = 64 * 1024
TARGET = 0.85  # outbox items/s >= 0.85 x direct items/s: the outbox costs under 15 %
WARM_UP = 20
# Settings that would point the service at PostgreSQL or Redis: removed so it runs embedded.
_EXTERNAL = ("CONCLAVE_DATABASE_URL", "CONCLAVE_BUS_URL", "RELDB_HOST", "BUS_HOST")


# Sample files -----------------------------------------------------------------------------------


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def base_png() -> bytes:
    """A 250x250 8-bit grey PNG of random pixels (incompressible: about 63 KB)."""
    rows = b"".join(b"\x00" + os.urandom(250) for _ in range(250))
    header = struct.pack(">IIBBBBB", 250, 250, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(rows, 1))
        + _png_chunk(b"IEND", b"")
    )


def png_variant(base: bytes, n: int) -> bytes:
    """``base`` with a ``tEXt`` chunk after IHDR holding ``n``, padded to :data:`FILE_BYTES`."""
    text = b"bench\x00" + str(n).encode()
    text += b" " * (FILE_BYTES - len(base) - 12 - len(text))
    data = base[:33] + _png_chunk(b"tEXt", text) + base[33:]
    assert len(data) == FILE_BYTES
    return data


def write_files(folder: Path, base: bytes, first: int, count: int) -> list[Path]:
    """``count`` distinct PNG files numbered from ``first``."""
    folder.mkdir(parents=True)
    paths = []
    for n in range(first, first + count):
        path = folder / f"shot-{n:06d}.png"
        path.write_bytes(png_variant(base, n))
        paths.append(path)
    return paths


# Server ------------------------------------------------------------------------------------------


def start_edge(port: int, data_dir: Path) -> subprocess.Popen[bytes]:
    """``conclave serve edge`` on ``port``, embedded (SQLite + in-process bus) in ``data_dir``."""
    env = {key: value for key, value in os.environ.items() if key not in _EXTERNAL}
    env.update(
        {
            "CONCLAVE_DATA_DIR": str(data_dir),
            "CONCLAVE_AUTH": "disabled",
            "CONCLAVE_LOG_LEVEL": "WARNING",
        }
    )
    command = [sys.executable, "-m", "conclave.cli.main", "serve", "edge", "--port", str(port)]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _children(pid: int) -> list[int]:
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    pids = [int(child) for child in found]
    return pids + [grand for child in pids for grand in _children(child)]


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its live descendants (the parser workers)."""
    seconds = (cpu_seconds(process) for process in (pid, *_children(pid)))
    return sum(value for value in seconds if value == value)  # a process gone since: NaN


async def pipeline(base_url: str) -> dict:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{base_url}/api/edge-intake/pipeline")
        response.raise_for_status()
        return response.json()


# Runs --------------------------------------------------------------------------------------------


@dataclass
class Run:
    mode: str
    concurrency: int
    items: int
    seconds: float
    client_cpu: float
    server_cpu: float
    packs: int

    @property
    def rate(self) -> float:
        return self.items / self.seconds

    def row(self, baseline: Run | None = None) -> str:
        ratio = f"{self.rate / baseline.rate:.2f}" if baseline else "—"
        return (
            f"| {self.mode} | {self.concurrency} | {self.items:,} | {self.seconds:.2f} | "
            f"{self.rate:,.1f} | {1000 * self.client_cpu / self.items:.2f} | "
            f"{1000 * self.server_cpu / self.items:.2f} | {ratio} |"
        )


async def measure(
    mode: str,
    concurrency: int,
    items: int,
    base_url: str,
    server_pid: int,
    send: Callable[[], Awaitable[None]],
    collect: Callable[[], list[list[str]]],
) -> Run:
    """Time ``send``, then check ``collect`` (the evidence ids of each upload) and the server."""
    before = await pipeline(base_url)
    server_cpu, client_cpu = tree_cpu_seconds(server_pid), time.process_time()
    started = time.perf_counter()
    await send()
    seconds = time.perf_counter() - started
    client_cpu = time.process_time() - client_cpu
    server_cpu = tree_cpu_seconds(server_pid) - server_cpu
    evidence = collect()
    after = await pipeline(base_url)
    packs = after["total_events"] - before["total_events"]
    ids = [evidence_id for answer in evidence for evidence_id in answer]
    problems = []
    if len(evidence) != items or any(len(answer) != 1 for answer in evidence):
        problems.append(f"{len(evidence)} answers for {items} uploads, or not one id each")
    if len(set(ids)) != items:
        problems.append(f"{len(set(ids))} distinct evidence ids for {items} uploads")
    if packs != items:
        problems.append(f"the server created {packs} packs for {items} uploads")
    if after["recent_errors"] != before["recent_errors"]:
        problems.append(f"upload errors {before['recent_errors']} -> {after['recent_errors']}")
    if problems:
        raise RuntimeError(f"{mode}, concurrency {concurrency}: " + "; ".join(problems))
    return Run(mode, concurrency, items, seconds, client_cpu, server_cpu, packs)


async def upload_directly(
    base_url: str, paths: list[Path], concurrency: int, device_id: str, answers: list[UploadResult]
) -> None:
    """``EdgeClient.upload`` of every path, ``concurrency`` at a time, no outbox."""
    work = iter(paths)
    async with EdgeClient(base_url) as client:

        async def worker() -> None:
            for path in work:  # one shared iterator: each path is taken by one worker
                answers.append(
                    await client.upload(
                        "image",
                        path,
                        metadata={"device_id": device_id},
                        idempotency_key=str(uuid.uuid4()),
                    )
                )

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def direct_evidence(answers: list[UploadResult]) -> list[list[str]]:
    if any(answer.status != "created" for answer in answers):
        raise RuntimeError("a direct upload was not answered 'created'")
    return [answer.evidence_ids for answer in answers]


async def sync_outbox(
    base_url: str, outbox: Outbox, concurrency: int, reports: list[SyncReport]
) -> None:
    """``Outbox.sync`` of everything queued (the delivery; receipts are fetched apart)."""
    async with EdgeClient(base_url) as client:
        reports.append(await outbox.sync(client, concurrency=concurrency, receipts=False))


async def fetch_receipts(base_url: str, outbox: Outbox, kept: list[tuple[int, float]]) -> None:
    """What a sync run with receipts does once its items are sent, timed apart."""
    started = time.perf_counter()
    async with EdgeClient(base_url) as client:
        count = await outbox.fetch_receipts(client)
    kept.append((count, time.perf_counter() - started))


def outbox_evidence(outbox: Outbox, report: SyncReport) -> list[list[str]]:
    if report.retrying or report.failed or report.duplicates or report.stopped:
        raise RuntimeError(f"outbox sync did not send everything cleanly: {report}")
    counts = outbox.counts()
    if counts["SENT"] != len(report.sent) or counts["PENDING"] or counts["FAILED"]:
        raise RuntimeError(f"outbox states after sync: {counts}")
    return [item.evidence_ids for item in outbox.sent()]


async def main(items: int, levels: list[int], rounds: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="conclave-bench-edge-client-"))
    port = free_port()
    base_url = f"http://{HOST}:{port}"
    server = start_edge(port, work / "server")
    base = base_png()
    numbers = iter(range(0, 10**9, items))
    runs: list[Run] = []
    enqueue_seconds: list[float] = []
    receipts: list[tuple[int, float]] = []
    try:
        await wait_ready(port, "/health")
        warm = write_files(work / "warm-up", base, next(numbers), WARM_UP)
        await upload_directly(base_url, warm, 2, "bench-warm-up", [])
        for round_index in range(rounds):
            for concurrency in levels:
                tag = f"r{round_index}-c{concurrency}"
                direct_files = write_files(work / f"direct-{tag}", base, next(numbers), items)
                outbox_files = write_files(work / f"outbox-{tag}", base, next(numbers), items)
                with Outbox(work / f"outbox-{tag}.sqlite3") as outbox:
                    started = time.perf_counter()
                    outbox.enqueue_many([Envelope.for_file("image", p) for p in outbox_files])
                    enqueue_seconds.append(time.perf_counter() - started)
                    answers: list[UploadResult] = []
                    reports: list[SyncReport] = []
                    device_id = outbox.device.device_id
                    plans = {
                        "direct": (
                            partial(
                                upload_directly,
                                base_url, direct_files, concurrency, device_id, answers,
                            ),
                            partial(direct_evidence, answers),
                        ),
                        "outbox": (
                            partial(sync_outbox, base_url, outbox, concurrency, reports),
                            lambda box=outbox, done=reports: outbox_evidence(box, done[0]),
                        ),
                    }  # fmt: skip
                    order = ["direct", "outbox"] if round_index % 2 == 0 else ["outbox", "direct"]
                    for mode in order:
                        send, collect = plans[mode]
                        runs.append(
                            await measure(
                                mode, concurrency, items, base_url, server.pid, send, collect
                            )
                        )
                    await fetch_receipts(base_url, outbox, receipts)
                for folder in (direct_files[0].parent, outbox_files[0].parent):
                    shutil.rmtree(folder)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"edge client benchmark: {items:,} files of 64 KiB (PNG) per run, {rounds} round(s), "
        f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}; server embedded (SQLite + "
        "in-process bus, temporary data folder), auth disabled, client in this process"
    )
    print(
        "| mode | concurrency | uploads | seconds | items/s | client CPU ms/item | "
        "server CPU ms/item | outbox/direct |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for round_index in range(rounds):
        for concurrency in levels:
            index = 2 * (round_index * len(levels) + levels.index(concurrency))
            pair = {run.mode: run for run in runs[index : index + 2]}
            print(pair["direct"].row())
            print(pair["outbox"].row(pair["direct"]))
    for concurrency in levels:
        mine = [run for run in runs if run.concurrency == concurrency]
        direct_rate = sum(r.items for r in mine if r.mode == "direct") / sum(
            r.seconds for r in mine if r.mode == "direct"
        )
        outbox_rate = sum(r.items for r in mine if r.mode == "outbox") / sum(
            r.seconds for r in mine if r.mode == "outbox"
        )
        ratio = outbox_rate / direct_rate
        verdict = "met" if ratio >= TARGET else "NOT met"
        target(
            f"edge client: outbox / direct sync, concurrency {concurrency}",
            f"{ratio:.2f}", f">= {TARGET:.2f}", ratio >= TARGET,
        )  # fmt: skip
        print(
            f"concurrency {concurrency}: outbox/direct = {ratio:.2f} "
            f"(outbox costs {100 * (1 - ratio):.1f} %; target >= {TARGET:.2f}, i.e. under "
            f"15 %: {verdict})"
        )
    print(
        "receipts and log entries fetched after each outbox run (Outbox.fetch_receipts, what "
        "sync(receipts=True) does once its items are sent; not timed above): "
        + ", ".join(f"{count:,} in {seconds:.1f} s" for count, seconds in receipts)
    )
    print(
        f"enqueue_many of {items:,} items (not timed above): median "
        f"{1000 * statistics.median(enqueue_seconds):.0f} ms; every run checked: one 'created' "
        "answer with one evidence id per upload, all ids distinct, outbox all SENT with no "
        f"retry, failure or duplicate, server packs +{items:,} per run, no upload errors"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument(
        "--concurrency", default="1,2", help="comma-separated levels (CLI sync default: 2)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="order alternates per round")
    options = parser.parse_args()
    levels = [int(level) for level in options.concurrency.split(",")]
    asyncio.run(main(options.items, levels, options.rounds))
