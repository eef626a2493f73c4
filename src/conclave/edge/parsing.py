"""Parser worker processes: media parsing off the event loop, with time and memory limits.

Media parsers run on untrusted bytes and have had infinite loops and memory blow-ups (pypdf CVEs,
decompression bombs). Each worker is a separate process with an address-space limit; a parse that
runs past its time-out gets its worker killed and replaced, and the upload a 422. A thread pool
could not do this: a stuck thread cannot be stopped.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import multiprocessing
import os
import struct
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from conclave.edge.parser_worker import worker_main
from conclave.platform.errors import Unavailable, Unprocessable, UnsupportedMediaType
from conclave.platform.problem_types import ProblemCode

log = logging.getLogger(__name__)

_STARTUP_TIMEOUT_SECONDS = 60.0


_HEADER = struct.Struct("!i")
_LONG_HEADER = struct.Struct("!Q")
MAX_MESSAGE_BYTES = 64 << 20
"""The largest answer read from a worker: a bigger one (no agent writes one) counts as a crash."""
_LOOP_DECODE_BYTES = 64 << 10
"""Answers up to this size are decoded on the event loop; larger ones in a thread."""


class _Frame:
    """One message of ``multiprocessing.connection``'s framing, fed as its bytes arrive: a 4-byte
    big-endian length (-1, then an 8-byte length, beyond 2 GiB), then the message's bytes."""

    def __init__(self) -> None:
        self._data = bytearray()
        self._size: int | None = None
        self._start = 0

    def feed(self, chunk: bytes) -> bytes | None:
        """The whole message once it has arrived; ``OSError`` for one past the size limit."""
        self._data += chunk
        if self._size is None:
            if len(self._data) < _HEADER.size:
                return None
            (size,) = _HEADER.unpack_from(self._data)
            self._start = _HEADER.size
            if size == -1:
                if len(self._data) < _HEADER.size + _LONG_HEADER.size:
                    return None
                (size,) = _LONG_HEADER.unpack_from(self._data, _HEADER.size)
                self._start += _LONG_HEADER.size
            if not 0 <= size <= MAX_MESSAGE_BYTES:
                raise OSError(f"a parser worker's answer of {size} bytes")
            self._size = size
        if len(self._data) - self._start < self._size:
            return None
        return bytes(self._data[self._start : self._start + self._size])


async def receive_message(connection: Connection, seconds: float) -> Any:
    """The next message on ``connection``, read without blocking the event loop; raises
    ``TimeoutError`` when it has not arrived whole within ``seconds``, ``EOFError`` when the
    worker closed its end (it died).

    Read on the loop as it arrives, never by ``connection.recv()`` in a thread: a thread per
    parse cost the service more CPU (hand-offs, contention for the interpreter) than the parse's
    answer itself. The descriptor is non-blocking only while it is read here (uvloop leaves a
    watched descriptor non-blocking; ``send`` needs it blocking)."""
    loop = asyncio.get_running_loop()
    descriptor = connection.fileno()
    frame = _Frame()
    arrived: asyncio.Future[bytes] = loop.create_future()

    def readable() -> None:
        if arrived.done():
            return
        try:
            chunk = os.read(descriptor, 1 << 16)
            if not chunk:
                raise EOFError("the parser worker closed its pipe")
            message = frame.feed(chunk)
        except (BlockingIOError, InterruptedError):
            return
        except (EOFError, OSError) as exc:
            arrived.set_exception(exc)
            return
        if message is not None:
            arrived.set_result(message)

    os.set_blocking(descriptor, False)
    loop.add_reader(descriptor, readable)
    try:
        async with asyncio.timeout(seconds):
            payload = await arrived
    finally:
        loop.remove_reader(descriptor)
        os.set_blocking(descriptor, True)
    if len(payload) <= _LOOP_DECODE_BYTES:
        return _decoded(payload)
    return await asyncio.to_thread(_decoded, payload)


def _decoded(payload: bytes) -> Any:
    """A worker's answer (:func:`conclave.edge.parser_worker.answer_bytes`); ``OSError`` (a
    crashed parser) for one that is not such JSON."""
    try:
        return json.loads(payload)
    except (ValueError, RecursionError):
        raise OSError("a parser worker's answer is not JSON") from None


def _summary(kind: str, value: Any) -> dict[str, Any]:
    """A parse job's summary; its other outcomes as the upload's error."""
    if kind == "unstored":
        log.error("the blob store refused a parsed file: %s", value)
        raise Unavailable(
            "The blob store could not store the file; nothing was stored.",
            code=ProblemCode.STORE_UNAVAILABLE,
        )
    if kind == "mismatch":
        raise UnsupportedMediaType(value, code=ProblemCode.UNSUPPORTED_MEDIA_TYPE)
    if kind == "unavailable":
        # The service loaded the plug-in and the worker could not (its log says why): not
        # the file's fault, and not something the uploader can fix.
        log.error("media type plug-in missing in a parser worker: %s", value)
        raise Unprocessable(value, code=ProblemCode.PARSER_FAILED)
    if kind != "ok":
        raise Unprocessable(value, code=ProblemCode.CORRUPT_MEDIA)
    return value  # type: ignore[no-any-return]


class _Worker:
    def __init__(self, context: Any, memory_bytes: int) -> None:
        self.connection, child = context.Pipe()
        self.process = context.Process(
            target=worker_main,
            args=(child, memory_bytes),
            name="conclave-edge-parser",
            daemon=True,
        )
        self.process.start()
        child.close()

    async def receive(self, seconds: float) -> Any:
        return await receive_message(self.connection, seconds)

    async def kill(self) -> None:
        self.process.kill()
        self.connection.close()
        await asyncio.to_thread(self.process.join, 5)


class ParserPool:
    """A fixed number of parser worker processes, started on first use (one may be started ahead
    with :meth:`prestart`) and replaced when killed."""

    def __init__(
        self, workers: int, *, timeout: float, memory_bytes: int, queue_seconds: float = 10.0
    ) -> None:
        self._timeout = timeout
        self._memory = memory_bytes
        self._queue_seconds = queue_seconds
        self._context = multiprocessing.get_context("spawn")
        # Last in, first out: a started worker is handed out before an empty slot, so one that
        # was started ahead serves the first upload, and sequential uploads start only one.
        self._idle: list[_Worker | None] = [None] * max(1, workers)  # slots start when needed
        # The uploads waiting for a worker, first come first served; a dict so that one leaving
        # the line (its request went away) costs the same however long the line is.
        self._waiting: collections.OrderedDict[asyncio.Future[_Worker | None], None] = (
            collections.OrderedDict()
        )
        self._all: set[_Worker] = set()
        self._closed = False

    async def _spawn(self) -> _Worker:
        self._refuse_if_closed()
        try:
            worker = _Worker(self._context, self._memory)
        except OSError as exc:  # no pipe or process to be had (file descriptors, memory)
            raise Unprocessable(
                "No parser worker could be started.", code=ProblemCode.PARSER_FAILED
            ) from exc
        self._all.add(worker)
        try:
            await worker.receive(_STARTUP_TIMEOUT_SECONDS)
        except (TimeoutError, EOFError, OSError) as exc:
            await self._retire(worker)
            self._refuse_if_closed()  # stopped by close() while it started
            raise Unprocessable(
                "No parser worker could be started.", code=ProblemCode.PARSER_FAILED
            ) from exc
        except BaseException:
            # Cancelled while it starts (the upload's request went away): its slot goes back
            # empty, so the process must not outlive this call, or the pool would grow by one.
            self._drop(worker)
            raise
        return worker

    def _drop(self, worker: _Worker) -> None:
        """Stop ``worker`` at once (nobody reads its pipe any more) and forget it; the process
        is reaped when the next one starts."""
        self._all.discard(worker)
        worker.process.kill()
        worker.connection.close()

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise Unavailable(
                "The service is stopping; try again shortly.",
                code=ProblemCode.UNAVAILABLE,
                headers={"Retry-After": "1"},
            )

    async def prestart(self) -> None:
        """Start one worker before the first upload needs it: spawning a process and importing
        the parsers takes about a second, which the first uploads after a start waited for
        (docs/benchmarks.md)."""
        if not self._idle:
            return  # every slot is in use: uploads already started the workers
        worker = self._idle.pop()
        try:
            if worker is None:
                worker = await self._spawn()
        except (Unprocessable, Unavailable):
            worker = None  # the next upload tries again (or the pool closed meanwhile)
        finally:
            self._put(worker)

    async def _take(self) -> _Worker | None:
        """An idle worker or slot, waited for at most ``queue_seconds``: when every worker stays
        busy (large files, or files made to be slow) the upload is refused (503) instead of
        queueing behind them for as long as they take."""
        self._refuse_if_closed()
        if self._idle:
            return self._idle.pop()
        waiter: asyncio.Future[_Worker | None] = asyncio.get_running_loop().create_future()
        self._waiting[waiter] = None
        try:
            async with asyncio.timeout(self._queue_seconds):
                return await waiter
        except TimeoutError:
            self._give_back(waiter)
            raise Unavailable(
                "Every parser worker is busy; try again shortly.",
                code=ProblemCode.PARSERS_BUSY,
                headers={"Retry-After": str(max(1, round(self._queue_seconds)))},
            ) from None
        except asyncio.CancelledError:
            self._give_back(waiter)
            raise

    def _put(self, worker: _Worker | None) -> None:
        """Hand a freed worker (or slot) straight to the first upload waiting for one, else keep
        it idle. Straight: the waiting upload resumes at the loop's next turn. Through an
        ``asyncio.Queue`` read by a task of its own it took three turns, and each turn of a busy
        service is a millisecond or more in which the worker sat idle (docs/benchmarks.md)."""
        if self._closed:
            if worker is not None:
                self._drop(worker)
            return
        while self._waiting:
            waiter, _ = self._waiting.popitem(last=False)
            if not waiter.done():
                waiter.set_result(worker)
                return
        self._idle.append(worker)

    def _give_back(self, waiter: asyncio.Future[_Worker | None]) -> None:
        # A waiter handed a worker just as its wait ended (time-out or cancellation) holds a
        # worker that must go back, or the pool would shrink for good; one still waiting leaves
        # the line.
        if waiter.done() and not waiter.cancelled():
            self._put(waiter.result())
            return
        waiter.cancel()
        self._waiting.pop(waiter, None)

    async def _retire(self, worker: _Worker) -> None:
        self._all.discard(worker)
        await worker.kill()

    async def parse(
        self,
        media_type: str,
        path: str,
        fmt: str,
        metadata: dict[str, Any],
        *,
        time_limit: float | None = None,
        place_as: Path | None = None,
        fsync: bool = True,
    ) -> dict[str, Any]:
        """The agent summary of one file; 422 when the file breaks or outlasts its parser, 415 when
        its inside contradicts the route's type.

        With ``place_as``, the worker also makes the file, once parsed, the blob of that content
        address (:func:`conclave.edge.blobs.place_blob`, with ``fsync``): the service then needs
        no thread of its own for it. 503 ``STORE_UNAVAILABLE`` when the blob store refused it."""
        placing = None if place_as is None else (str(place_as), fsync)
        kind, value = await self._run(
            ("parse", (media_type, path, fmt, metadata, placing)),
            time_limit,
            timed_out="Parsing the file took longer than allowed.",
        )
        return _summary(kind, value)

    async def parse_bytes(
        self,
        media_type: str,
        data: bytes,
        path: Path,
        fmt: str,
        metadata: dict[str, Any],
        *,
        time_limit: float | None = None,
        fsync: bool = True,
    ) -> dict[str, Any]:
        """:meth:`parse` for a small file held in memory: the worker writes ``data`` to ``path``
        (a new name beside its blob, :meth:`conclave.edge.blobs.BlobStore.beside`) and parses
        it there. On a summary the file stays for the caller to make it the blob; on any other
        outcome it is gone. The bytes go through the worker's pipe in one send, which the idle
        worker reads at once (:data:`conclave.edge.blobs.SMALL_PART_BYTES`)."""
        try:
            kind, value = await self._run(
                ("parse bytes", (media_type, str(path), fmt, metadata, data, fsync)),
                time_limit,
                timed_out="Parsing the file took longer than allowed.",
            )
        except BaseException:
            # The worker died or was stopped, maybe before it could delete what it wrote.
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        return _summary(kind, value)

    async def thumbnail(
        self, path: str, fmt: str, target: Path, *, time_limit: float | None = None
    ) -> str | None:
        """Make the thumbnail of the file at ``path`` (sniffed as ``fmt``) at ``target``
        (:mod:`conclave.edge.agents.thumbnail`): ``None`` once made, else why the file gives
        none (one that outlasts the time limit, or crashes its worker, gives none either)."""
        try:
            kind, value = await self._run(
                ("thumbnail", (path, fmt, str(target))),
                time_limit,
                timed_out="Making the thumbnail took longer than allowed.",
            )
        except Unprocessable as exc:
            if exc.code == ProblemCode.PARSER_FAILED:
                raise  # no worker could start: not the file's fault
            return exc.detail
        return None if kind == "ok" else str(value)

    async def _run(
        self, job: tuple[str, tuple[Any, ...]], time_limit: float | None, *, timed_out: str
    ) -> tuple[str, Any]:
        """One job on an idle worker: its answer ``(kind, value)``; 422 ``PARSE_TIMEOUT`` when it
        outlasts ``time_limit`` and ``CORRUPT_MEDIA`` when its worker dies (the worker is then
        replaced), 503 ``PARSERS_BUSY`` when no worker frees up in time."""
        worker = await self._take()
        try:
            if worker is not None and not worker.process.is_alive():
                self._drop(worker)  # killed from outside while it was idle
                worker = None
            if worker is None:
                worker = await self._spawn()
            worker.connection.send(job)
            kind, value = await worker.receive(time_limit or self._timeout)
        except TimeoutError:
            if worker is not None:
                await self._retire(worker)
            worker = None
            raise Unprocessable(timed_out, code=ProblemCode.PARSE_TIMEOUT) from None
        except (EOFError, OSError, BrokenPipeError):
            # The worker died under this file (native crash or killed for memory), or the
            # service stopped it (then the file is not to blame).
            if worker is not None:
                await self._retire(worker)
            worker = None
            self._refuse_if_closed()
            raise Unprocessable(
                "The file crashed its parser.", code=ProblemCode.CORRUPT_MEDIA
            ) from None
        except asyncio.CancelledError:
            # The request went away mid-job: the worker is still working, or its answer is
            # still in the pipe. Reused, it would hand that answer to the next job; it is
            # replaced instead.
            if worker is not None:
                self._drop(worker)
            worker = None
            raise
        finally:
            self._put(worker)
        return kind, value

    @property
    def free(self) -> int:
        """Workers and empty slots no job holds right now."""
        return len(self._idle)

    def worker_pids(self) -> list[int]:
        """Process ids of the started workers (the benchmark reads their memory from /proc)."""
        return [worker.process.pid for worker in self._all if worker.process.pid is not None]

    async def close(self) -> None:
        """Stop every worker. Uploads waiting for one are refused (503 ``UNAVAILABLE``), a parse
        under way ends as its worker does (503 too), and no worker starts afterwards."""
        self._closed = True
        while self._waiting:
            waiter, _ = self._waiting.popitem(last=False)
            if not waiter.done():
                waiter.set_result(None)  # it then finds the pool closed
        idle = [worker for worker in self._idle if worker is not None]
        self._idle.clear()
        # A worker in use is only killed: the parse reading its pipe meets the end of the file
        # and retires it. Closing a pipe such a read watches would leave the read waiting out
        # its time limit (the event loop forgets a closed descriptor without a word).
        for worker in list(self._all):
            if worker not in idle:
                worker.process.kill()
        for worker in idle:
            with contextlib.suppress(Exception):
                await self._retire(worker)
