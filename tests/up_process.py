"""`conclave up` as a user starts it: one process, the four services and the console on free
loopback ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

SERVICES = ("gateway", "collector", "graph", "edge", "console")
PORT_SETTINGS = {
    "gateway": "GATEWAY_PORT",
    "collector": "COLLECTOR_API_PORT",
    "graph": "GRAPH_PORT",
    "edge": "EDGE_PORT",
    "console": "CONSOLE_PORT",
}
# Every setting family of the developer's shell that could steer the process under test.
_SETTING_PREFIXES = (
    "CONCLAVE_", "RELDB_", "BUS_", "GATEWAY_", "GRAPH_", "COLLECTOR_", "EDGE_", "CONSOLE_"
)  # fmt: skip


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports nothing listens on right now (all held open while chosen)."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [int(sock.getsockname()[1]) for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


@dataclass
class Up:
    process: subprocess.Popen[bytes]
    log: Path
    urls: dict[str, str]  # service name -> base URL
    ports: dict[str, int]

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_up(data_dir: Path, **settings: str) -> Up:
    """Start ``conclave up`` with ``data_dir`` as its data folder, its output in
    ``data_dir/up.log``, the four services and the console on free ports."""
    ports = dict(zip(SERVICES, free_ports(len(SERVICES)), strict=True))
    environment = {k: v for k, v in os.environ.items() if not k.startswith(_SETTING_PREFIXES)}
    environment.update(CONCLAVE_DATA_DIR=str(data_dir), **settings)
    environment.update({PORT_SETTINGS[name]: str(port) for name, port in ports.items()})
    log = data_dir / "up.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "conclave.cli.main", "up"],
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    return Up(process, log, {n: f"http://127.0.0.1:{p}" for n, p in ports.items()}, ports)


@contextmanager
def conclave_up(data_dir: Path, **settings: str) -> Iterator[Up]:
    """Run ``conclave up`` (:func:`start_up`) until the block ends. The block starts once every
    service is healthy; afterwards ``process.returncode`` tells how it stopped."""
    up = start_up(data_dir, **settings)
    process = up.process
    try:
        _wait_healthy(up)
        yield up
    finally:
        process.terminate()
        process.wait(timeout=30)


def _wait_healthy(up: Up) -> None:
    pending = set(up.urls.values())
    deadline = time.monotonic() + 60
    while pending and time.monotonic() < deadline and up.process.poll() is None:
        for url in list(pending):
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    pending.discard(url)
            except httpx.TransportError:
                pass
        time.sleep(0.3)
    assert not pending, f"not healthy: {sorted(pending)}\n{up.output()[-3000:]}"
