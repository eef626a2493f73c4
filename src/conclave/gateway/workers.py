"""Worker processes for CPU-bound tools, so a time-out really stops them.

A tool's executor runs on the gateway's event loop, where ``asyncio.timeout`` can only fire at an
``await``: synchronous work (a big-integer power, a JMESPath evaluation) blocks every other request,
``/health`` included, until it ends. A tool that declares a ``cpu_executor`` (a synchronous,
module-level function) is run here instead: in one of a few long-lived child processes, one call at
a time each. When the call's time-out fires, the child is killed and a fresh one takes its place on
the next call, so nothing keeps burning CPU after the caller got its 504. Starting a child (an
interpreter and its imports) is the gateway's cost, not the tool's: the call's deadline is moved by
that long. As a backstop every child arms a real-time timer before each
call whose signal ends the process even inside one long C call, and exits when its parent goes
away (its input pipe closes).

The protocol is private to this module: length-prefixed pickles over the child's stdin and a
dedicated copy of its stdout (``print`` in a tool goes to stderr). The child is this module run by
the same interpreter with the parent's import path, so plug-in modules resolve alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import struct
import sys
from dataclasses import replace
from typing import Any, BinaryIO

from conclave.gateway.tools import CpuExecutor, ToolContext, ToolExecutionError
from conclave.platform.problem_types import ProblemCode

_HEADER = struct.Struct("!I")
# Seconds a child may run past the caller's deadline before its own timer ends it.
_GRACE = 1.0
_NO_DEADLINE = 3600.0
_START_SECONDS = 30.0
_READY = ("ready",)
_READY_BYTES = 64
_BOOTSTRAP = (
    "import sys; sys.path[:0] = sys.argv[1:]; from conclave.gateway.workers import serve; serve()"
)


class WorkerLost(RuntimeError):
    """The worker process died during a call (killed, out of memory, crashed)."""


class _Worker:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls) -> _Worker:
        path = [entry for entry in sys.path if entry]
        pipe = asyncio.subprocess.PIPE
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _BOOTSTRAP, *path, stdin=pipe, stdout=pipe
        )
        worker = cls(process)
        try:
            await worker._reply(_READY_BYTES)  # it has imported what it needs
        except BaseException:
            worker.kill()
            await process.wait()
            raise
        return worker

    async def call(self, request: tuple[Any, ...], max_reply_bytes: int) -> tuple[Any, ...]:
        assert self.process.stdin is not None
        frame = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.write(_HEADER.pack(len(frame)) + frame)
        try:
            await self.process.stdin.drain()
        except ConnectionError as exc:
            raise WorkerLost("the tool's worker process has ended") from exc
        return await self._reply(max_reply_bytes)

    async def _reply(self, max_reply_bytes: int) -> tuple[Any, ...]:
        assert self.process.stdout is not None
        try:
            (length,) = _HEADER.unpack(await self.process.stdout.readexactly(_HEADER.size))
            if length > max_reply_bytes:
                message = f"The tool's result is larger than {max_reply_bytes:,} bytes."
                raise ToolExecutionError(message, code=ProblemCode.RESULT_TOO_LARGE, status=422)
            reply: tuple[Any, ...] = pickle.loads(await self.process.stdout.readexactly(length))
        except asyncio.IncompleteReadError as exc:
            raise WorkerLost("the tool's worker process ended during the call") from exc
        return reply

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()


class WorkerPool:
    """Up to ``size`` worker processes, started on first use; a call waits for a free one."""

    def __init__(self, size: int, *, max_reply_bytes: int) -> None:
        self._slots = asyncio.Semaphore(size)
        self._idle: list[_Worker] = []
        self._ending: set[asyncio.Task[int]] = set()
        self._max_reply_bytes = max_reply_bytes
        self._closed = False

    async def run(
        self,
        function: CpuExecutor,
        args: dict[str, Any],
        context: ToolContext,
        deadline: asyncio.Timeout,
    ) -> Any:
        """``function(args, context)`` in a worker, within the caller's ``deadline`` (an
        ``asyncio.timeout`` scope): when it fires, the worker is killed. Waiting for a free worker
        counts against the deadline; starting a new one does not. The worker also ends itself a
        little after the deadline, should this process be stuck."""
        loop = asyncio.get_running_loop()
        if context.progress is not None:  # a function of this process: it cannot be sent
            context = replace(context, progress=None)
        async with self._slots:
            if self._idle:
                worker = self._idle.pop()
            else:
                worker = await self._start(deadline)
            when = deadline.when()
            backstop = (when - loop.time() if when is not None else _NO_DEADLINE) + _GRACE
            try:
                reply = await worker.call(
                    (function, args, context, max(backstop, _GRACE)), self._max_reply_bytes
                )
            except BaseException:
                # Time-out, cancellation, a lost or oversized answer: its state is unknown.
                self._retire(worker)
                raise
            if self._closed:  # the gateway stopped while this call ran
                self._retire(worker)
            else:
                self._idle.append(worker)
        kind, *rest = reply
        if kind == "ok":
            return rest[0]
        if kind == "refused":
            message, code, status = rest
            raise ToolExecutionError(message, code=code, status=status)
        raise RuntimeError(f"the tool's function raised {rest[0]}")

    async def _start(self, deadline: asyncio.Timeout) -> _Worker:
        # The deadline is suspended while the worker starts and moved by as long afterwards.
        loop = asyncio.get_running_loop()
        when, starting = deadline.when(), loop.time()
        deadline.reschedule(None)
        try:
            async with asyncio.timeout(_START_SECONDS):
                worker = await _Worker.start()
        except TimeoutError as exc:
            raise WorkerLost("a worker process did not start") from exc
        finally:
            if when is not None:
                deadline.reschedule(when + loop.time() - starting)
        return worker

    def _retire(self, worker: _Worker) -> None:
        worker.kill()
        ending = asyncio.create_task(worker.process.wait())
        self._ending.add(ending)
        ending.add_done_callback(self._ending.discard)

    async def close(self) -> None:
        """Stop every worker."""
        self._closed = True
        while self._idle:
            self._retire(self._idle.pop())
        if self._ending:
            await asyncio.gather(*self._ending, return_exceptions=True)


def serve() -> None:
    """The child's loop: read a call, run it, answer, until the parent closes the pipe."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a tool's print() must not corrupt the protocol
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers end
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the backstop timer ends the process
    _answer(replies, _READY)
    requests = sys.stdin.buffer
    while True:
        header = requests.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return  # the parent is gone
        (length,) = _HEADER.unpack(header)
        reply = _call(requests.read(length))
        signal.setitimer(signal.ITIMER_REAL, 0)
        _answer(replies, reply)


def _call(request: bytes) -> tuple[Any, ...]:
    try:
        # Unpickling imports the function's module: a plug-in that fails to import fails its call.
        function, args, context, backstop = pickle.loads(request)
        signal.setitimer(signal.ITIMER_REAL, backstop)
        return ("ok", function(args, context))
    except ToolExecutionError as exc:
        return ("refused", exc.message, exc.code, exc.status)
    except Exception as exc:  # reported to the parent, which logs it as a tool failure
        return ("crashed", type(exc).__name__)


def _answer(replies: BinaryIO, reply: tuple[Any, ...]) -> None:
    try:
        frame = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # a result that cannot cross a process boundary is not JSON either
        frame = pickle.dumps(("crashed", f"an unpicklable result ({type(exc).__name__})"))
    replies.write(_HEADER.pack(len(frame)) + frame)
    replies.flush()
