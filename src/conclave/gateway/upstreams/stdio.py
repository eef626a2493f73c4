"""The stdio transport to an upstream MCP server: its process, and its lines capped.

The MCP SDK's own ``stdio_client`` reads a line of any length into memory and parses it on the
event loop, and tells nobody when the process dies. This transport frames the same
newline-delimited JSON-RPC (the SDK's types parse and serialise every message; the SDK's
``ClientSession`` runs the protocol over it) with what supervision needs:

- a line longer than ``max_line_bytes`` is never kept whole: the rest of it is skipped as it
  arrives, and when its first bytes show the JSON-RPC ``id`` of a response, that request is
  answered at once with an error naming :data:`ANSWER_TOO_LARGE` (a request or a notification
  that large is dropped and logged); a line the SDK's types cannot parse (nested beyond the JSON
  parser's recursion limit, for one) likewise fails its request at once;
- the process gets a session of its own, so the whole process tree is stopped with it; its
  standard error is read and logged line by line (each cut at 500 characters), never shown to
  callers (it may hold anything);
- :attr:`StdioProcess.returncode` is set when the process is gone, so the supervisor restarts it.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

import anyio
import mcp_types as types
from anyio.abc import ByteReceiveStream, Process
from mcp.client._transport import TransportStreams
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from conclave.gateway.upstreams.config import McpServerSpec
from conclave.platform.egress_mcp import ANSWER_TOO_LARGE

log = logging.getLogger(__name__)

_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')
_PREFIX = 512
_STOP_GRACE_SECONDS = 2.0
UNREADABLE_ANSWER = "answer the gateway could not read (not JSON-RPC, or nested too deeply)"


@dataclass
class StdioProcess:
    """What the supervisor knows of the running process."""

    pid: int | None = None
    returncode: int | None = None
    """Set when the process has exited (the supervisor looks at it)."""


def _error_reply(prefix: bytes, message: str) -> SessionMessage | None:
    """An error response, saying ``message``, for the request whose response the gateway could
    not take (too large, or unparseable) and which begins with ``prefix``: the request fails at
    once rather than at its time-out."""
    if b'"method"' in prefix:
        return None  # a request or notification of the server's: nobody waits for it
    found = _ID.search(prefix)
    if found is None:
        return None
    raw = found.group(1)
    request_id: int | str = int(raw) if raw[:1] != b'"' else raw[1:-1].decode("utf-8", "replace")
    error = types.ErrorData(code=types.INTERNAL_ERROR, message=message)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def _parse(line: bytes) -> SessionMessage | Exception:
    """The message of ``line``; for one the SDK's types refuse (not JSON-RPC, or nested beyond
    the JSON parser's recursion limit), an error response to its request when its id shows."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        reply = _error_reply(line[:_PREFIX], UNREADABLE_ANSWER)
        return reply if reply is not None else exc


async def _log_stderr(stream: ByteReceiveStream, server: str) -> None:
    """Log what the process writes to standard error, one bounded line at a time."""
    pending = b""
    with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        async for chunk in stream:
            pending = (pending + chunk)[-4096:]
            *lines, pending = pending.split(b"\n")
            for line in lines:
                text = line.decode("utf-8", "replace")[:500]
                log.info("upstream stderr: %s", text, extra={"upstream": server})


async def _stop(process: Process) -> None:
    """Terminate the process group, then kill it if it does not leave within the grace."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    with anyio.move_on_after(_STOP_GRACE_SECONDS):
        await process.wait()
        return
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with anyio.move_on_after(_STOP_GRACE_SECONDS):
        await process.wait()


@asynccontextmanager
async def stdio_transport(
    spec: McpServerSpec, state: StdioProcess, *, max_line_bytes: int
) -> AsyncIterator[TransportStreams]:
    """Start ``spec``'s command and yield the SDK's stream pair over its stdin and stdout."""
    assert spec.command is not None
    executable = shutil.which(spec.command)
    if executable is None:
        raise FileNotFoundError(f"command {spec.command!r} is not on PATH")
    process = await anyio.open_process(
        [executable, *spec.args],
        env=get_default_environment() | spec.env,
        cwd=spec.cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    state.pid = process.pid
    reader_in, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, writer_out = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_stdout() -> None:
        assert process.stdout is not None
        line = bytearray()
        skipping: bytes | None = None  # the first bytes of an oversized line being skipped
        async with reader_in:
            with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                async for chunk in process.stdout:
                    start = 0
                    while start <= len(chunk):
                        end = chunk.find(b"\n", start)
                        piece = chunk[start:] if end < 0 else chunk[start:end]
                        if skipping is None:
                            line += piece
                            if len(line) > max_line_bytes:
                                skipping, line = bytes(line[:_PREFIX]), bytearray()
                        if end < 0:
                            break
                        start = end + 1
                        if skipping is not None:
                            too_large = f"{ANSWER_TOO_LARGE} ({max_line_bytes} bytes)"
                            reply = _error_reply(skipping, too_large)
                            log.warning("upstream line over the cap", extra={"upstream": spec.name})
                            skipping = None
                            if reply is not None:
                                await reader_in.send(reply)
                        elif line.strip():
                            message, line = _parse(bytes(line)), bytearray()
                            await reader_in.send(message)
                        else:
                            line = bytearray()

    async def write_stdin() -> None:
        assert process.stdin is not None
        async with writer_out:
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for message in writer_out:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")

    async def watch_exit() -> None:
        state.returncode = await process.wait()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(read_stdout)
            group.start_soon(write_stdin)
            group.start_soon(watch_exit)
            assert process.stderr is not None
            group.start_soon(_log_stderr, process.stderr, spec.name)
            try:
                yield read_stream, write_stream
            finally:
                group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
            for stream in (read_stream, write_stream):
                await stream.aclose()
            await process.aclose()
        state.returncode = process.returncode if process.returncode is not None else -1
