"""The `conclave` command: serve refuses to run open, migrate applies the schema, up starts all."""

from __future__ import annotations

import http.server
import json
import pathlib
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from typer.testing import CliRunner

from conclave.cli.main import app
from conclave.platform.db.migrate import head_revision
from tests.up_process import conclave_up, start_up

runner = CliRunner()


def test_serve_refuses_to_start_without_auth(monkeypatch: pytest.MonkeyPatch):
    for name in (
        "CONCLAVE_API_TOKENS",
        "CONCLAVE_JWT_SECRET",
        "CONCLAVE_JWT_PUBLIC_KEY",
        "CONCLAVE_AUTH",
    ):
        monkeypatch.delenv(name, raising=False)
    result = runner.invoke(app, ["serve", "gateway"])
    assert result.exit_code == 2
    assert "authentication is not configured" in result.output
    assert "CONCLAVE_AUTH=disabled" in result.output


def test_serve_refuses_a_malformed_token_table(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CONCLAVE_API_TOKENS", "just-a-token")
    result = runner.invoke(app, ["serve", "gateway"])
    assert result.exit_code == 2
    assert "token=user_id" in result.output


def test_migrate_creates_the_embedded_store(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CONCLAVE_DATA_DIR", str(tmp_path))
    for name in ("CONCLAVE_DATABASE_URL", "RELDB_HOST"):
        monkeypatch.delenv(name, raising=False)
    result = runner.invoke(app, ["migrate"])
    assert result.exit_code == 0, result.output
    assert f"revision {head_revision()}" in result.output
    assert (tmp_path / "conclave.db").exists()


def test_up_starts_all_four_services_and_the_console_embedded(tmp_path):
    with conclave_up(tmp_path, CONCLAVE_HEADER_TIMEOUT_SECONDS="1") as up:
        gateway, collector = up.urls["gateway"], up.urls["collector"]
        response = httpx.post(
            f"{gateway}/execute", json={"tool": "echo", "args": {"message": "embedded"}}
        )
        assert response.status_code == 200
        assert response.json()["result"] == {"message": "embedded"}
        assert (tmp_path / "conclave.db").exists()

        # The README tour: the file source reads its inbox, made at start-up, and nothing else.
        (tmp_path / "inbox" / "items.jsonl").write_text('{"id": "b1", "title": "Old bridge"}\n')
        collect = httpx.post(
            f"{collector}/expedition/run",
            json={"expedition_type": "discovery",
                  "parameters": {"sources": [{"type": "file", "path": "items.jsonl"}]}},
        )  # fmt: skip
        assert collect.status_code == 202, collect.text
        status_url = collect.json()["status_url"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and httpx.get(status_url).json()["status"] != "completed":
            time.sleep(0.2)
        assert httpx.get(status_url).json()["results"]["records"]["inserted"] == 1
        refused = httpx.post(
            f"{collector}/expedition/run",
            json={"expedition_type": "discovery",
                  "parameters": {"sources": [{"type": "file", "path": "../conclave.db"}]}},
        )  # fmt: skip
        assert refused.json()["code"] == "FILE_REFUSED"
        _console_shows_the_services(up.urls["console"])
        # All four at once: each waits out the 1 s header timeout (one after another took 4 s).
        with ThreadPoolExecutor(max_workers=len(up.ports)) as pool:
            codes = list(pool.map(_header_timeout, up.ports.values()))
        assert codes == ["HEADER_TIMEOUT"] * len(up.ports)
    text = up.output()
    assert "auth: off" in text
    assert "file source inbox" in text
    assert up.process.returncode == 0, text[-2000:]


def _console_shows_the_services(console: str) -> None:
    """With auth off the console's sign-in takes no token, and its overview finds the four
    services where ``up`` started them (its addresses follow their ports)."""
    with httpx.Client(base_url=console) as browser:
        form = browser.get("/signin")
        assert "Authentication is off" in form.text
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert token is not None
        signed = browser.post("/signin", data={"csrf_token": token.group(1), "token": ""})
        assert signed.status_code == 303, signed.text
        overview = browser.get("/overview")
        assert overview.text.count('class="badge healthy"') == 4, overview.text
        calls = browser.get("/calls")
        assert "echo" in calls.text  # the call made above, in the audit trail


def _header_timeout(port: int) -> str:
    """Start a request and never finish its headers: the server must answer 408 and close."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: conclave\r\n")
        answer = b""
        while chunk := sock.recv(4096):  # until the server closes
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:200]
    return str(json.loads(body)["code"])


class _RecordingBackend:
    """A real HTTP server on loopback that answers every POST with an empty object and records
    its paths: the graph address named explicitly, which `up` must not replace."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        paths = self.paths

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                paths.append(self.path)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_up_on_other_ports_links_the_services_on_those_ports(tmp_path):
    # With non-default ports and no service URLs set, the services must call each other on the
    # ports in use (they called 8050/8008/8004: search_evidence answered 503, /dispatch degraded);
    # an address set explicitly wins.
    named_graph = _RecordingBackend()
    try:
        with conclave_up(tmp_path, GATEWAY_GRAPH_URL=named_graph.url) as up:
            gateway, graph = up.urls["gateway"], up.urls["graph"]
            searched = httpx.post(
                f"{gateway}/execute", json={"tool": "search_evidence", "args": {"limit": 5}}
            )
            assert searched.status_code == 200, searched.text
            assert searched.json()["status"] == "succeeded"
            dispatched = httpx.post(f"{graph}/dispatch", json={"query": "bridges"})
            assert dispatched.status_code == 200, dispatched.text
            assert dispatched.json()["degraded"] == []  # the collector step reached the collector
            httpx.post(
                f"{gateway}/execute", json={"tool": "dispatch_query", "args": {"query": "bridges"}}
            )
            assert named_graph.paths == ["/dispatch"]  # the explicit GATEWAY_GRAPH_URL was used
    finally:
        named_graph.close()
    assert up.process.returncode == 0, up.output()[-2000:]


def test_up_does_not_say_it_is_up_when_a_service_is_not(tmp_path: pathlib.Path) -> None:
    """A gateway that cannot start (its catalogue is broken) stops the others and ``up`` says
    which one failed, instead of printing its table of running services."""
    catalogue = tmp_path / "tools.yaml"
    catalogue.write_text("tools: [{name: broken}]\n")
    up = start_up(tmp_path, GATEWAY_TOOL_CATALOGUES=str(catalogue))
    try:
        returncode = up.process.wait(timeout=90)
    finally:
        up.process.kill()
    output = up.output()
    assert returncode == 3, output[-3000:]
    assert "Conclave did not start: gateway" in output
    assert "Conclave is up" not in output
    assert "tool catalogue" in output  # the cause, in the log
