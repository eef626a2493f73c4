"""An outside attack on the drained 413 and on the JSON-RPC wording of problems at /mcp.

Each test runs the real gateway (``conclave serve gateway``, embedded, loopback) in a process of
its own and talks to it over raw sockets or httpx, as a client on the network would. Each failed
before its fix. (The HTTP server's own refusals, 408 and 431, stay plain problems at /mcp:
docs/gateway.md.)
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.httpserver import free_port

CAP = 1024  # CONCLAVE_MAX_BODY_BYTES of the gateways below
DRAIN = 8 << 20  # what the platform reads of a refused body beyond the cap
MCP_ACCEPT = "application/json, text/event-stream"


def _serve(data_dir: Path, **settings: str) -> Iterator[str]:
    prefixes = ("CONCLAVE_", "GATEWAY_", "RELDB_", "BUS_", "MCP_")
    environment = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    environment.update(CONCLAVE_DATA_DIR=str(data_dir), CONCLAVE_MAX_BODY_BYTES=str(CAP))
    environment.update(settings)
    port = free_port()
    log = data_dir / "gateway.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                *("-m", "conclave.cli.main", "serve", "gateway"),
                *("--host", "127.0.0.1", "--port", str(port)),
            ],
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                pytest.fail(f"the gateway exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the gateway did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway with authentication off and a 1 KiB body cap (default read deadlines)."""
    yield from _serve(tmp_path_factory.mktemp("gateway"), CONCLAVE_AUTH="disabled")


@pytest.fixture(scope="module")
def fast_deadlines_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway whose read deadlines are scaled down so a slow body is cut in seconds: a body
    may take 1 s plus one second per MiB received, with no pause over 2 s."""
    yield from _serve(
        tmp_path_factory.mktemp("gateway-fast"),
        CONCLAVE_AUTH="disabled",
        CONCLAVE_BODY_TIMEOUT_SECONDS="1",
        CONCLAVE_BODY_IDLE_TIMEOUT_SECONDS="2",
        CONCLAVE_BODY_MIN_BYTES_PER_SECOND=str(1 << 20),
    )


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _head(path: str, port: int, *extra: str) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        f"Accept: {MCP_ACCEPT}",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize("path", ["/mcp", "/tools"])
def test_expect_100_continue_over_the_cap_is_refused_without_inviting_the_body(
    gateway: str, path: str
):
    """A client that declares an over-cap body and asks ``Expect: 100-continue`` (curl does for
    any body over 1 MiB) should get the final 413 at once and never be told to send the body
    (RFC 9110 section 10.1.1). Before the drain it did; now the drain's first ``receive()`` makes
    uvicorn write ``100 Continue`` and the server then reads up to cap + 8 MiB it has already
    decided to refuse."""
    port = _port(gateway)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(
            _head(path, port, f"Content-Length: {CAP + (2 << 20)}", "Expect: 100-continue")
        )
        first = sock.recv(65536)
    assert not first.startswith(b"HTTP/1.1 100"), first[:200]  # observed: 100 Continue
    assert first.startswith(b"HTTP/1.1 413"), first[:200]


def test_a_refused_body_cannot_hold_the_connection_longer_than_an_accepted_one(
    fast_deadlines_gateway: str,
):
    """A refused body's connection should not outlive what the body cap allows an accepted
    body: ``CONCLAVE_BODY_TIMEOUT_SECONDS`` plus cap / ``CONCLAVE_BODY_MIN_BYTES_PER_SECOND``
    (here 1 s + 1 KiB / 1 MiB/s, about 1 s, plus the 2 s idle slack). The drain reads up to
    cap + 8 MiB, and every byte drained earns the client more time, so a client that sends 8 MiB
    at once and then one byte a second keeps the connection (and its request task) for
    1 s + 8 s. At the default settings (60 s, 4096 B/s) the same client holds each connection for
    60 s + 9 MiB / 4096 B/s, about 39 minutes, where an over-cap request used to be answered at
    once and an accepted 1 MiB body could last about 5 minutes."""
    port = _port(fast_deadlines_gateway)
    declared = CAP + DRAIN
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        started = time.monotonic()
        try:
            sock.sendall(_head("/mcp", port, f"Content-Length: {declared}") + b"x" * (DRAIN - 64))
        except OSError:  # answered and closed while the body was still being sent
            return
        started = time.monotonic()
        sock.settimeout(0.05)
        answer = b""
        sent = DRAIN - 64
        while time.monotonic() - started < 20 and sent < declared:
            try:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
                break
            except TimeoutError:
                pass
            except OSError:
                break
            if time.monotonic() - started > (sent - (DRAIN - 64)) * 1.0:
                try:
                    sock.sendall(b"x")
                except OSError:
                    break
                sent += 1
        held = time.monotonic() - started
    assert held < 4, f"a refused body held the connection {held:.1f} s ({answer[:40]!r})"


def test_an_explicit_refusal_of_problem_json_beats_a_wildcard(gateway: str):
    """``Accept: application/problem+json;q=0, */*`` refuses problem+json outright: the more
    specific range wins (RFC 9110 section 12.5.1). The adapter takes ``*/*`` alone as admitting
    it and serves application/problem+json, the one type the client said it does not accept."""
    answer = httpx.post(
        f"{gateway}/mcp",
        content=b"x" * (CAP + 1),
        headers={"content-type": "application/json", "accept": "application/problem+json;q=0, */*"},
    )
    assert answer.status_code == 413
    assert answer.headers["content-type"] == "application/json"  # observed: problem+json
