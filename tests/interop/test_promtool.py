"""`promtool check metrics` (Prometheus' own linter) on every service's /metrics, after traffic.

The four services run as a user runs them (`conclave up`, one process, real HTTP), and each
serves requests that fill its counters and histograms (successes and refusals) before it is
scraped. promtool comes with Debian's ``prometheus`` package; scripts/test installs it where it can
(as root); without it the test is skipped locally and fails in CI (``CONCLAVE_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from PIL import Image

from tests.conftest import missing_service
from tests.up_process import SERVICES, conclave_up


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        missing_service("promtool not installed (Debian package `prometheus`; scripts/test)")
    return str(found)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`conclave up` on free ports: the base URL of each service."""
    with conclave_up(tmp_path_factory.mktemp("up")) as up:
        yield up.urls


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def _traffic(urls: dict[str, str]) -> None:
    """Requests that succeed and requests that are refused, on every service."""
    gateway, collector, graph, edge, console = (urls[name] for name in SERVICES)
    with httpx.Client(timeout=30) as client:
        assert client.get(f"{console}/signin").status_code == 200
        assert client.get(f"{console}/calls").status_code == 303  # not signed in
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
        deadline = time.monotonic() + 60
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
