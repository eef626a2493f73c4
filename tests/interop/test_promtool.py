"""`promtool check metrics` (Prometheus' own linter) on every service's /metrics, after traffic.

The four services run as a user runs them (`conclave up`, one process, real HTTP), and each
serves requests that fill its counters and histograms (successes and refusals) before it is
scraped. promtool comes with Debian's ``prometheus`` package; scripts/test installs it where it can
(as root); without it the test is skipped locally and fails in CI (``CONCLAVE_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image

from tests.conftest import missing_service

SERVICES = ("gateway", "collector", "graph", "edge")
PORT_SETTINGS = {
    "gateway": "GATEWAY_PORT",
    "collector": "COLLECTOR_API_PORT",
    "graph": "GRAPH_PORT",
    "edge": "EDGE_PORT",
}


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        missing_service("promtool not installed (Debian package `prometheus`; scripts/test)")
    return str(found)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`conclave up` on free ports: the base URL of each service."""
    data_dir = tmp_path_factory.mktemp("up")
    ports = dict(zip(SERVICES, _free_ports(len(SERVICES)), strict=True))
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CONCLAVE_", "RELDB_", "BUS_", "GATEWAY_", "GRAPH_", "COLLECTOR_"))
        and not key.startswith("EDGE_")
    }
    env["CONCLAVE_DATA_DIR"] = str(data_dir)
    env.update({PORT_SETTINGS[name]: str(port) for name, port in ports.items()})
    log = (data_dir / "up.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "conclave.cli.main", "up"], env=env, stdout=log, stderr=log
    )
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    try:
        _wait_healthy(urls.values(), process, data_dir / "up.log")
        yield urls
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _wait_healthy(urls: object, process: subprocess.Popen[bytes], log: Path) -> None:
    pending = set(urls)  # type: ignore[call-overload]
    deadline = time.monotonic() + 60
    while pending and time.monotonic() < deadline and process.poll() is None:
        for url in list(pending):
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    pending.discard(url)
            except httpx.TransportError:
                pass
        time.sleep(0.3)
    assert not pending, log.read_text()[-3000:]


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def _traffic(urls: dict[str, str]) -> None:
    """Requests that succeed and requests that are refused, on every service."""
    gateway, collector, graph, edge = (urls[name] for name in SERVICES)
    with httpx.Client(timeout=30) as client:
        assert client.get(f"{gateway}/tools").status_code == 200
        execute = f"{gateway}/execute"
        assert client.post(execute, json={"tool": "echo", "args": {"message": "m"}}).is_success
        assert client.post(execute, json={"tool": "no_such_tool", "args": {}}).status_code == 404
        assert client.post(execute, json={"tool": "echo", "args": {}}).status_code == 422
        run = client.post(f"{collector}/expedition/run", json={"expedition_type": "audit"})
        assert run.status_code == 202, run.text
        assert client.get(f"{collector}/expedition/status/nothing-here").status_code == 404
        assert client.post(f"{graph}/dispatch", json={"query": "bridges"}).status_code == 200
        assert client.post(f"{graph}/dispatch", json={}).status_code == 422
        intake = f"{edge}/api/edge-intake/image"
        png = {"file": ("red.png", _png(), "image/png")}
        assert client.post(intake, files=png).status_code == 200
        not_png = {"file": ("fake.png", b"plain text", "image/png")}
        assert client.post(intake, files=not_png).status_code == 415
        status_url = run.json()["status_url"]
        deadline = time.monotonic() + 30
        while client.get(status_url).json()["status"] not in ("completed", "failed"):
            assert time.monotonic() < deadline
            time.sleep(0.2)


@pytest.fixture(scope="module")
def scraped(services: dict[str, str]) -> dict[str, str]:
    """Each service's /metrics text after the traffic."""
    _traffic(services)
    pages = {}
    for name, url in services.items():
        response = httpx.get(f"{url}/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        pages[name] = response.text
    return pages


@pytest.mark.parametrize("service", SERVICES)
def test_promtool_finds_nothing_to_report(promtool: str, scraped: dict[str, str], service: str):
    page = scraped[service]
    assert f"conclave_{service}_http_requests_total{{" in page  # the traffic was counted
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=page, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == ""
