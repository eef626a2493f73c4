"""Transparency-log proofs at 10 million leaves (issue 20): their server time, in process and over
HTTP, next to the same app's trivial answers, and the log's storage per leaf.

Run: ``.venv/bin/python -m bench.tlog_proofs [--leaves 10000000] [--samples 2000]``

1. Build, in a throw-away PostgreSQL database: the log is opened as a service opens it (its row and
   signed checkpoint of size 0), then bulk-built rather than appended. Each leaf is a
   ``conclave.call/v1``-like JSON entry of about 260 bytes (a function of its index); its leaf hash
   and every complete subtree hash are computed here, level by level (each level halves the one
   below); levels from ``TILE_LEVEL`` up are stored (those below are computed on read from the leaf
   hashes, as the store does), and both tables are filled with binary ``COPY``, their primary keys
   dropped for the load and added back after, then ``VACUUM ANALYZE`` (what autovacuum does to a
   grown table). The log's row and one signed checkpoint of the whole tree are then written with the
   store's own functions, as the sequencer and the integrator would, so the service's read path
   serves the log unchanged. The root is checked against the core's ``AppendFrontier`` fold of the
   same leaf hashes, and a sample of the answers below with the core's verify functions (receipts
   with the log's key and the entries' bytes). The heap of subtrees is written level by level, where
   the integrator writes each subtree as it completes: a proof's keys are on as many heap pages
   here, fewer in a grown log (the primary key is the same either way).
2. In process: ``TransparencyLog.inclusion_proof`` and ``consistency_proof`` at random indices
   and sizes, and ``PublishedLogs.receipt`` (what ``/receipt`` serves) at random indices, one
   call at a time; baseline ``TransparencyLog.latest_checkpoint`` (one statement). Then the
   proof statement itself (``store.subtree_hashes``) under ``EXPLAIN (ANALYZE, BUFFERS)`` for
   proofs not asked before: its plan, its planning and execution time, and the blocks it had to
   read from outside PostgreSQL's shared buffers.
3. Over HTTP: the platform's tlog router mounted on a tiny app (:mod:`bench.tlog_app`) in a
   uvicorn process on loopback, one httpx request at a time; "server" is the app's own
   ``Server-Timing`` (request in to response start), "client" the round trip. Baselines in the
   same process: ``/ping`` (no statement) and ``/logs/<name>/checkpoint`` (one statement).
4. Storage: the tables of leaves and subtrees (heap with TOAST and maps, then primary keys) per
   leaf, from ``pg_table_size`` and ``pg_indexes_size``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import struct
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import numpy as np
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from bench.report import percentile, target
from bench.servers import PG_ADMIN, cpu_seconds, free_port, start_process, wait_ready
from conclave.platform.clock import utc_now
from conclave.platform.db.engine import create_engine
from conclave.platform.db.migrate import migrate
from conclave.platform.tlog import LogKeys, TransparencyLog, store, tiles
from conclave.platform.tlog.published import PublishedLogs
from conclave.platform.tlog.tiles import TILE_LEVEL
from conclave.platform.transparency import (
    AppendFrontier,
    Checkpoint,
    NoteSigner,
    ProofPlan,
    Receipt,
    Subtree,
    VerifierSet,
    base64text,
    consistency_plan,
    inclusion_plan,
    sign_checkpoint,
    tree_root,
    verify_consistency,
    verify_inclusion,
    verify_receipt,
)

NAME = "bench"
ORIGIN = f"bench.localhost/{NAME}"
TOOLS = ("echo", "search_docs", "weather", "sql_query")
CHUNK = 1 << 16  # leaves per COPY chunk
VERIFIED = 200  # answers of each kind checked with the core's verify functions
CORE_CHECK = "check: the core's AppendFrontier over every leaf hash"

# Binary COPY (PostgreSQL's documented format): a header, then per row the field count and each
# field as its length and big-endian bytes, then -1.
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
COPY_TRAILER = struct.pack(">h", -1)
LEAF_ROW = struct.Struct(">hiiiqi32si")  # log_id, leaf_index, leaf_hash, then data's length
SUBTREE_ROW = np.dtype(
    [("fields", ">i2"), ("n1", ">i4"), ("log_id", ">i4"), ("n2", ">i4"), ("level", ">i2"),
     ("n3", ">i4"), ("index", ">i8"), ("n4", ">i4"), ("hash", "V32")]
)  # fmt: skip


def entry(index: int) -> bytes:
    """Leaf ``index``'s entry: canonical JSON shaped like a call entry, about 260 bytes (a real
    ``conclave.call/v1`` entry, with three hashes and two times, is about 540)."""
    seed = b"%d" % index
    call = uuid.UUID(bytes=hashlib.md5(seed).digest(), version=4)
    second = index // 100
    day, hour, minute = 1 + second // 86400, second // 3600 % 24, second // 60 % 60
    stamp = f"2026-11-{day:02d}T{hour:02d}:{minute:02d}:{second % 60:02d}.{index % 100:06d}Z"
    return (
        f'{{"args_sha256":"{hashlib.sha256(seed).hexdigest()}","conclave_id":"{call}",'
        f'"created_at":"{stamp}","format":"conclave.call/v1","http_status":200,'
        f'"status":"succeeded","tool":"{TOOLS[index % len(TOOLS)]}"}}'
    ).encode("ascii")


def _parents(level: bytes) -> bytes:
    """The next level up: ``SHA-256(0x01 || left || right)`` of each complete pair."""
    count = len(level) // 64
    framed = np.empty((count, 65), np.uint8)
    framed[:, 0] = 1
    framed[:, 1:] = np.frombuffer(level, np.uint8, count * 64).reshape(count, 64)
    view = memoryview(framed.tobytes())
    sha = hashlib.sha256
    return b"".join([sha(view[at : at + 65]).digest() for at in range(0, count * 65, 65)])


class Levels:
    """Every complete subtree hash of the bulk-built tree, a ``bytes`` per level: the core's
    ``HashSource``, to compute roots at any size for verification."""

    def __init__(self, leaf_hashes: bytes) -> None:
        self.hashes = [leaf_hashes]
        while len(self.hashes[-1]) >= 64:
            self.hashes.append(_parents(self.hashes[-1]))

    def subtree_hashes(self, subtrees: Sequence[Subtree]) -> list[bytes]:
        return [self.hashes[s.level][s.index * 32 : s.index * 32 + 32] for s in subtrees]


@dataclass(frozen=True)
class Scratch:
    dsn: str

    @property
    def url(self) -> str:
        return self.dsn.replace("postgresql://", "postgresql+asyncpg://", 1)


@asynccontextmanager
async def scratch_database() -> AsyncIterator[Scratch]:
    """A database of its own, dropped afterwards (this bench needs no Redis)."""
    database = f"conclave_bench_tlog_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(PG_ADMIN)
    await admin.execute(f'CREATE DATABASE "{database}"')
    try:
        yield Scratch(PG_ADMIN.rsplit("/", 1)[0] + f"/{database}")
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.close()


@dataclass
class Build:
    leaves: int
    log_id: int
    levels: Levels
    root: bytes
    seconds: dict[str, float]
    data_bytes: int


async def _copy_leaves(
    connection: asyncpg.Connection, log_id: int, leaves: int
) -> tuple[bytes, int]:
    """COPY the leaves: their hashes in order, and the bytes of their entries."""
    hashes = bytearray()
    data_bytes = 0

    async def rows() -> AsyncIterator[bytes]:
        nonlocal data_bytes
        yield COPY_HEADER
        sha = hashlib.sha256
        for first in range(0, leaves, CHUNK):
            parts = []
            for index in range(first, min(leaves, first + CHUNK)):
                data = entry(index)
                digest = sha(b"\x00" + data).digest()
                hashes.extend(digest)
                parts.append(LEAF_ROW.pack(4, 4, log_id, 8, index, 32, digest, len(data)) + data)
                data_bytes += len(data)
            yield b"".join(parts)
            await asyncio.sleep(0)
        yield COPY_TRAILER

    columns = ["log_id", "leaf_index", "leaf_hash", "data"]
    await connection.copy_to_table("tlog_leaves", source=rows(), columns=columns, format="binary")
    return bytes(hashes), data_bytes


async def _copy_subtrees(connection: asyncpg.Connection, log_id: int, levels: Levels) -> int:
    """COPY every complete subtree hash the store keeps (levels ``TILE_LEVEL`` and up, as the
    integrator writes them); the number of rows."""
    stored = list(enumerate(levels.hashes))[TILE_LEVEL:]
    total = sum(len(level) // 32 for _, level in stored)

    async def rows() -> AsyncIterator[bytes]:
        yield COPY_HEADER
        for number, level in stored:
            count = len(level) // 32
            for first in range(0, count, 1 << 20):
                part = min(count, first + (1 << 20)) - first
                block = np.empty(part, SUBTREE_ROW)
                block["fields"], block["n1"], block["log_id"] = 4, 4, log_id
                block["n2"], block["level"], block["n3"] = 2, number, 8
                block["index"] = np.arange(first, first + part, dtype=np.int64)
                block["n4"] = 32
                block["hash"] = np.frombuffer(level, "V32", part, first * 32)
                yield block.tobytes()
                await asyncio.sleep(0)
        yield COPY_TRAILER

    columns = ["log_id", "level", "subtree_index", "hash"]
    await connection.copy_to_table("tlog_subtrees", source=rows(), columns=columns, format="binary")
    return total


def _core_root(leaf_hashes: bytes) -> bytes:
    """The root as the integrator computes it: the core's frontier, fed every leaf hash."""
    frontier = AppendFrontier()
    count = len(leaf_hashes) // 32
    for first in range(0, count, CHUNK):
        last = min(count, first + CHUNK)
        batch = [leaf_hashes[at * 32 : at * 32 + 32] for at in range(first, last)]
        frontier = frontier.append(batch).frontier
    return frontier.root()


async def build(scratch: Scratch, leaves: int, keys: LogKeys, signer: NoteSigner) -> Build:
    seconds: dict[str, float] = {}
    engine = create_engine(scratch.url)
    try:
        await migrate(engine)
        log = await TransparencyLog.open(engine, NAME, keys)
        log_id = (await log.state()).log_id
    finally:
        await engine.dispose()
    connection = await asyncpg.connect(scratch.dsn)
    try:
        await connection.execute("SET maintenance_work_mem = '1GB'")
        for table in ("tlog_leaves", "tlog_subtrees"):
            await connection.execute(f"ALTER TABLE {table} DROP CONSTRAINT pk_{table}")
        started = time.perf_counter()
        leaf_hashes, data_bytes = await _copy_leaves(connection, log_id, leaves)
        seconds["entries, leaf hashes and COPY of tlog_leaves"] = time.perf_counter() - started
        started = time.perf_counter()
        levels = Levels(leaf_hashes)
        seconds["subtree hashes (numpy + hashlib)"] = time.perf_counter() - started
        started = time.perf_counter()
        rows = await _copy_subtrees(connection, log_id, levels)
        seconds[f"COPY of tlog_subtrees ({rows:,} rows)"] = time.perf_counter() - started
        started = time.perf_counter()
        await connection.execute(
            "ALTER TABLE tlog_leaves ADD CONSTRAINT pk_tlog_leaves PRIMARY KEY (log_id, leaf_index)"
        )
        await connection.execute(
            "ALTER TABLE tlog_subtrees ADD CONSTRAINT pk_tlog_subtrees "
            "PRIMARY KEY (log_id, level, subtree_index)"
        )
        seconds["primary keys added back"] = time.perf_counter() - started
        started = time.perf_counter()
        await connection.execute("VACUUM ANALYZE tlog_leaves, tlog_subtrees")
        seconds["VACUUM ANALYZE"] = time.perf_counter() - started
    finally:
        await connection.close()
    root = tree_root(levels, leaves)
    started = time.perf_counter()
    core = _core_root(leaf_hashes)
    seconds[CORE_CHECK] = time.perf_counter() - started
    if core != root:
        raise RuntimeError("the bulk-built tree's root is not the core's")
    # The log's row and its checkpoint, as the sequencer (allocate) and integrator would write them.
    engine = create_engine(scratch.url)
    try:
        async with engine.begin() as writer:
            now = utc_now()
            note = sign_checkpoint(Checkpoint(ORIGIN, leaves, root), signer).decode("utf-8")
            if await store.allocate(writer, log_id, leaves) != 0:
                raise RuntimeError("the bench log was not empty")
            await store.insert_checkpoint(writer, log_id, leaves, root, note, now)
            if not await store.set_integrated(writer, log_id, 0, leaves, root, now):
                raise RuntimeError("the bench log moved")
    finally:
        await engine.dispose()
    return Build(leaves, log_id, levels, root, seconds, data_bytes)


@dataclass
class Timings:
    """Milliseconds of one kind of call: over HTTP the server's, then the client's."""

    name: str
    millis: list[float]
    client: list[float] | None = None

    def row(self) -> str:
        figures = f"{_p50(self.millis):.3f} | {percentile(self.millis, 0.99):.3f}"
        if self.client is not None:
            figures += f" | {_p50(self.client):.3f} | {percentile(self.client, 0.99):.3f}"
        return f"| {self.name} | {figures} |"


def _p50(values: list[float]) -> float:
    return percentile(values, 0.50)


def _inclusion_args(rng: random.Random, leaves: int, count: int) -> list[tuple[int, int]]:
    sizes = [rng.randint(1, leaves) for _ in range(count)]
    return [(rng.randrange(size), size) for size in sizes]


def _consistency_args(rng: random.Random, leaves: int, count: int) -> list[tuple[int, int]]:
    pairs = [sorted((rng.randint(1, leaves), rng.randint(1, leaves))) for _ in range(count)]
    return [(old, new) for old, new in pairs]


async def _timed(
    name: str, call: Callable[[Any], Awaitable[Any]], arguments: list[Any]
) -> tuple[Timings, list[Any]]:
    millis, answers = [], []
    for argument in arguments:
        started = time.perf_counter()
        answer = await call(argument)
        millis.append((time.perf_counter() - started) * 1000)
        answers.append(answer)
    return Timings(name, millis), answers


def _check_inclusion(built: Build, arguments: list[tuple[int, int]], proofs: list[Any]) -> None:
    for (index, size), proof in zip(arguments[:VERIFIED], proofs[:VERIFIED], strict=True):
        leaf = built.levels.hashes[0][index * 32 : index * 32 + 32]
        verify_inclusion(leaf, index, size, proof, tree_root(built.levels, size))


def _check_consistency(built: Build, arguments: list[tuple[int, int]], proofs: list[Any]) -> None:
    for (old, new), proof in zip(arguments[:VERIFIED], proofs[:VERIFIED], strict=True):
        roots = tree_root(built.levels, old), tree_root(built.levels, new)
        verify_consistency(old, new, *roots, proof)


def _check_receipts(keys: LogKeys, indices: list[int], receipts: list[Receipt]) -> None:
    verifiers = VerifierSet(keys.verifiers)
    for index, receipt in zip(indices[:VERIFIED], receipts[:VERIFIED], strict=True):
        verify_receipt(receipt, verifiers, entry(index))


async def in_process(
    scratch: Scratch, built: Build, keys: LogKeys, samples: int, rng: random.Random
) -> list[Timings]:
    engine = create_engine(scratch.url)
    try:
        log = await TransparencyLog.open(engine, NAME, keys)
        published = PublishedLogs([log])
        inclusion = _inclusion_args(rng, built.leaves, samples)
        consistency = _consistency_args(rng, built.leaves, samples)
        indices = [rng.randrange(built.leaves) for _ in range(samples)]
        # Warm-up: the pool's connections and their prepared statements.
        for index, size in inclusion[:50]:
            await log.inclusion_proof(index, size)
        baseline, _ = await _timed(
            "latest_checkpoint() (baseline, one statement)",
            lambda _: log.latest_checkpoint(),
            [None] * samples,
        )
        proofs, proved = await _timed(
            "inclusion_proof(index, size)", lambda a: log.inclusion_proof(*a), inclusion
        )
        extensions, extended = await _timed(
            "consistency_proof(old, new)", lambda a: log.consistency_proof(*a), consistency
        )
        receipts, received = await _timed(
            "PublishedLogs.receipt(index)", lambda i: published.receipt(NAME, i), indices
        )
    finally:
        await engine.dispose()
    _check_inclusion(built, inclusion, proved)
    _check_consistency(built, consistency, extended)
    _check_receipts(keys, indices, received)
    return [baseline, proofs, extensions, receipts]


async def statements(
    scratch: Scratch, built: Build, count: int, rng: random.Random
) -> tuple[list[Explained], list[str]]:
    """The proof statement under EXPLAIN ANALYZE, for proofs not asked before: one inclusion and
    one consistency proof run twice (first as a request meets it, then with the pages the first
    run read in PostgreSQL's shared buffers), then the figures of ``count`` more of each."""
    index, size = rng.randrange(built.leaves), built.leaves
    [(old, new)] = _consistency_args(rng, built.leaves, 1)
    inclusion = [inclusion_plan(*a) for a in _inclusion_args(rng, built.leaves, count)]
    consistency = [consistency_plan(*a) for a in _consistency_args(rng, built.leaves, count)]
    plans = []
    async with explaining(scratch) as connection:
        for what, plan in (
            (f"inclusion proof of leaf {index} at size {size}", inclusion_plan(index, size)),
            (f"consistency proof from {old} to {new}", consistency_plan(old, new)),
        ):
            plans.append(await explain(connection, built.log_id, what, plan))
            plans.append(await explain(connection, built.log_id, "the same again", plan))
        rows = []
        for what, planned in (("inclusion", inclusion), ("consistency", consistency)):
            explained = [await explain(connection, built.log_id, what, p) for p in planned]
            rows.append(_statement_row(f"{count} {what} proofs", explained))
    return plans, rows


async def _http_timed(
    client: httpx.AsyncClient, name: str, paths: list[str]
) -> tuple[Timings, list[Any]]:
    server, rounds, answers = [], [], []
    for path in paths:
        started = time.perf_counter()
        response = await client.get(path)
        rounds.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"GET {path}: {response.status_code} {response.text[:300]}")
        server.append(float(response.headers["server-timing"].split("dur=")[1]))
        answers.append(response.json() if "json" in response.headers["content-type"] else None)
    return Timings(name, server, rounds), answers


def _hashes(texts: list[str]) -> list[bytes]:
    return [base64text.decode(text, "a proof hash") for text in texts]


async def over_http(
    scratch: Scratch, built: Build, keys: LogKeys, signer: NoteSigner, samples: int,
    rng: random.Random,
) -> tuple[list[Timings], float]:  # fmt: skip
    """The timings, and the server process's CPU milliseconds per request during them."""
    port = free_port()
    env = {
        "BENCH_TLOG_DATABASE_URL": scratch.url,
        "BENCH_TLOG_NAME": NAME,
        "BENCH_TLOG_SIGNER_KEY": signer.skey(),
    }
    server = start_process(
        [sys.executable, "-m", "uvicorn", "bench.tlog_app:app", "--port", str(port),
         "--no-access-log", "--log-level", "warning"], env,
    )  # fmt: skip
    inclusion = _inclusion_args(rng, built.leaves, samples)
    consistency = _consistency_args(rng, built.leaves, samples)
    indices = [rng.randrange(built.leaves) for _ in range(samples)]
    base = f"/logs/{NAME}"
    try:
        await wait_ready(port, "/ping")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            warm = [f"{base}/proof/inclusion?index={i}&size={s}" for i, s in inclusion[:100]]
            await _http_timed(client, "warm-up", ["/ping"] * 100 + warm)
            cpu_before = cpu_seconds(server.pid)
            ping, _ = await _http_timed(client, "GET /ping (baseline)", ["/ping"] * samples)
            latest, _ = await _http_timed(
                client, f"GET {base}/checkpoint (baseline)", [f"{base}/checkpoint"] * samples
            )
            proofs, proved = await _http_timed(
                client,
                f"GET {base}/proof/inclusion",
                [f"{base}/proof/inclusion?index={i}&size={s}" for i, s in inclusion],
            )
            extensions, extended = await _http_timed(
                client,
                f"GET {base}/proof/consistency",
                [f"{base}/proof/consistency?from={a}&to={b}" for a, b in consistency],
            )
            receipts, received = await _http_timed(
                client, f"GET {base}/receipt/{{index}}", [f"{base}/receipt/{i}" for i in indices]
            )
            cpu_ms = (cpu_seconds(server.pid) - cpu_before) * 1000 / (5 * samples)
    finally:
        server.terminate()
        server.wait(timeout=10)
    _check_inclusion(built, inclusion, [_hashes(a["inclusion_proof"]) for a in proved])
    _check_consistency(built, consistency, [_hashes(a["proof"]) for a in extended])
    _check_receipts(keys, indices, [Receipt.parse(a) for a in received])
    return [ping, latest, proofs, extensions, receipts], cpu_ms


@dataclass(frozen=True)
class Explained:
    """EXPLAIN (ANALYZE, BUFFERS) of the one statement a proof is read with."""

    what: str
    keys: int
    nodes: str
    planning: float
    execution: float
    hit: int
    read: int
    read_ms: float | None  # time reading the blocks not in shared buffers (track_io_timing)

    def line(self) -> str:
        reading = "" if self.read_ms is None else f" in {self.read_ms:.3f} ms"
        return (
            f"EXPLAIN ANALYZE, {self.what} ({self.keys} keys and leaf ranges): {self.nodes}; "
            "planning "
            f"{self.planning:.3f} ms, execution {self.execution:.3f} ms; shared buffers "
            f"{self.hit} hit, {self.read} read{reading}"
        )


def _nodes(plan: dict[str, Any]) -> str:
    name = plan["Node Type"] + (f" using {plan['Index Name']}" if "Index Name" in plan else "")
    children = [_nodes(child) for child in plan.get("Plans", [])]
    return f"{name} ({', '.join(children)})" if children else name


@asynccontextmanager
async def explaining(scratch: Scratch) -> AsyncIterator[AsyncConnection]:
    """A connection to run EXPLAIN on, timing its reads where the role may (a superuser, as the
    bench's default role is)."""
    engine = create_engine(scratch.url, pool_size=1)
    try:
        async with engine.connect() as connection:
            with contextlib.suppress(DBAPIError):
                async with connection.begin_nested():
                    await connection.execute(text("SET LOCAL track_io_timing = on"))
            yield connection
    finally:
        await engine.dispose()


async def explain(
    connection: AsyncConnection, log_id: int, what: str, plan: ProofPlan
) -> Explained:
    """Run the store's proof statement (``store.subtree_hashes`` on PostgreSQL) for ``plan``
    under EXPLAIN (ANALYZE, BUFFERS): its stored keys, and its ranges of leaf hashes."""
    read = tiles.plan_read(plan.subtrees)
    keys = len(read.stored) + len(read.leaf_ranges)
    values = {
        "log_id": log_id,
        "levels": [subtree.level for subtree in read.stored],
        "indices": [subtree.index for subtree in read.stored],
        "starts": [start for start, _ in read.leaf_ranges],
        "ends": [end for _, end in read.leaf_ranges],
    }
    statement = text("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + store._SUBTREE_HASHES.text)
    document = (await connection.execute(statement, values)).scalar()
    [result] = json.loads(document) if isinstance(document, str) else document
    top = result["Plan"]
    return Explained(
        what,
        keys,
        _nodes(top),
        result["Planning Time"],
        result["Execution Time"],
        top["Shared Hit Blocks"],
        top["Shared Read Blocks"],
        top.get("I/O Read Time"),
    )


def _statement_row(what: str, explained: list[Explained]) -> str:
    planning = [e.planning for e in explained]
    execution = [e.execution for e in explained]
    reads = [float(e.read) for e in explained]
    return (
        f"| {what} | {_p50(planning):.3f} | {percentile(planning, 0.99):.3f} | "
        f"{_p50(execution):.3f} | {percentile(execution, 0.99):.3f} | {_p50(reads):.0f} | "
        f"{max(reads):.0f} |"
    )


@dataclass(frozen=True)
class Storage:
    table: str
    rows: int
    heap: int  # pg_table_size: the heap, its TOAST and its free-space and visibility maps
    indexes: int  # pg_indexes_size: the primary key


async def storage(scratch: Scratch) -> list[Storage]:
    connection = await asyncpg.connect(scratch.dsn)
    try:
        found = []
        for table in ("tlog_leaves", "tlog_subtrees"):
            row = await connection.fetchrow(
                f"SELECT count(*) AS n, pg_table_size('{table}') AS heap, "
                f"pg_indexes_size('{table}') AS indexes FROM {table}"
            )
            found.append(Storage(table, row["n"], row["heap"], row["indexes"]))
        return found
    finally:
        await connection.close()


async def main(leaves: int, samples: int) -> None:
    rng = random.Random(20)
    signer = NoteSigner.generate(ORIGIN)
    keys = LogKeys(ORIGIN, (signer,))
    load = os.getloadavg()
    async with scratch_database() as scratch:
        started = time.perf_counter()
        built = await build(scratch, leaves, keys, signer)
        build_seconds = time.perf_counter() - started
        local = await in_process(scratch, built, keys, samples, rng)
        plans, figures = await statements(scratch, built, max(10, samples // 10), rng)
        remote, cpu_ms = await over_http(scratch, built, keys, signer, samples, rng)
        sizes = await storage(scratch)
    load_after = os.getloadavg()

    print(f"tlog_proofs benchmark: {leaves:,} leaves, {samples:,} calls of each kind, "
          f"{os.cpu_count()} CPUs, load average {load[0]:.1f} before and {load_after[0]:.1f} "
          f"after, {time.strftime('%Y-%m-%d')}")  # fmt: skip
    checked = min(VERIFIED, samples)
    check = built.seconds[CORE_CHECK]
    print(f"build: {build_seconds - check:.0f} s, and {check:.0f} s more for the core's check of "
          f"the root; entries {built.data_bytes / leaves:.0f} bytes on average; {checked} "
          "answers of each kind verified with the core (receipts with the log's key and entry "
          "bytes)")  # fmt: skip
    print("| build step | seconds |")
    print("|---|---:|")
    for step, took in built.seconds.items():
        print(f"| {step} | {took:.1f} |")
    print("| in process (one call at a time) | p50 ms | p99 ms |")
    print("|---|---:|---:|")
    for timings in local:
        print(timings.row())
    for explained in plans:
        print(explained.line())
    print("| proof statement in PostgreSQL (EXPLAIN ANALYZE), fresh random sizes | planning p50 "
          "ms | planning p99 ms | execution p50 ms | execution p99 ms | blocks read p50 | "
          "blocks read max |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in figures:
        print(row)
    print("| over HTTP (one request at a time) | server p50 ms | server p99 ms | "
          "client p50 ms | client p99 ms |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for timings in remote:
        print(timings.row())
    print(f"server process CPU: {cpu_ms:.3f} ms per request over the five kinds (PostgreSQL's "
          "own time not included)")  # fmt: skip
    print("| table | rows | table bytes/leaf | index bytes/leaf | total bytes/leaf |")
    print("|---|---:|---:|---:|---:|")
    for size in sizes:
        total = (size.heap + size.indexes) / leaves
        print(f"| {size.table} | {size.rows:,} | {size.heap / leaves:.1f} | "
              f"{size.indexes / leaves:.1f} | {total:.1f} |")  # fmt: skip
    heap, indexes = sum(s.heap for s in sizes), sum(s.indexes for s in sizes)
    print(f"| both | | {heap / leaves:.1f} | {indexes / leaves:.1f} | "
          f"{(heap + indexes) / leaves:.1f} |")  # fmt: skip
    print(f"rows per leaf (what the integrator writes): {sum(s.rows for s in sizes) / leaves:.3f}")
    ping, checkpoint, proofs, extensions, receipts = remote
    for timings in (proofs, extensions, receipts):
        ratio = _p50(timings.millis) / _p50(checkpoint.millis)
        versus = _p50(timings.millis) / _p50(ping.millis)
        print(f"ratio {timings.name} / checkpoint, server p50: {ratio:.2f}; / ping: {versus:.2f}")
    goal = "< 5 ms"
    for timings, what in ((proofs, "inclusion"), (extensions, "consistency")):
        p99 = percentile(timings.millis, 0.99)
        target(f"tlog: {what} proof p99 server time over HTTP at {leaves:,} leaves",
               f"{p99:.2f} ms", goal, p99 < 5)  # fmt: skip
    for timings, what in ((local[1], "inclusion"), (local[2], "consistency")):
        p99 = percentile(timings.millis, 0.99)
        target(f"tlog: {what} proof p99 in process at {leaves:,} leaves",
               f"{p99:.2f} ms", goal, p99 < 5)  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--leaves", type=int, default=10_000_000)
    parser.add_argument("--samples", type=int, default=2000)
    options = parser.parse_args()
    asyncio.run(main(options.leaves, options.samples))
