"""The `conclave` command: serve refuses to run open, migrate applies the schema, up starts all."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from typer.testing import CliRunner

from conclave.cli.main import app
from conclave.platform.db.migrate import head_revision

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


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def test_up_starts_all_four_services_embedded(tmp_path):
    gateway, collector, graph, edge = _free_ports(4)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CONCLAVE_", "RELDB_", "BUS_"))
    }
    env.update(
        CONCLAVE_DATA_DIR=str(tmp_path), GATEWAY_PORT=str(gateway),
        COLLECTOR_API_PORT=str(collector), GRAPH_PORT=str(graph), EDGE_PORT=str(edge),
        CONCLAVE_HEADER_TIMEOUT_SECONDS="1",
    )  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "conclave.cli.main", "up"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        healthy: set[int] = set()
        while time.monotonic() < deadline and len(healthy) < 4:
            for port in (gateway, collector, graph, edge):
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                        healthy.add(port)
                except httpx.TransportError:
                    pass
            time.sleep(0.3)
        assert healthy == {gateway, collector, graph, edge}
        response = httpx.post(
            f"http://127.0.0.1:{gateway}/execute",
            json={"tool": "echo", "args": {"message": "embedded"}},
        )
        assert response.status_code == 200
        assert response.json()["result"] == {"message": "embedded"}
        assert (tmp_path / "conclave.db").exists()

        # The README tour: the file source reads its inbox, made at start-up, and nothing else.
        (tmp_path / "inbox" / "items.jsonl").write_text('{"id": "b1", "title": "Old bridge"}\n')
        collect = httpx.post(
            f"http://127.0.0.1:{collector}/expedition/run",
            json={"expedition_type": "discovery",
                  "parameters": {"sources": [{"type": "file", "path": "items.jsonl"}]}},
        )  # fmt: skip
        assert collect.status_code == 202, collect.text
        status_url = collect.json()["status_url"]
        while time.monotonic() < deadline and httpx.get(status_url).json()["status"] != "completed":
            time.sleep(0.2)
        assert httpx.get(status_url).json()["results"]["records"]["inserted"] == 1
        refused = httpx.post(
            f"http://127.0.0.1:{collector}/expedition/run",
            json={"expedition_type": "discovery",
                  "parameters": {"sources": [{"type": "file", "path": "../conclave.db"}]}},
        )  # fmt: skip
        assert refused.json()["code"] == "FILE_REFUSED"
        for port in (gateway, collector, graph, edge):
            assert _header_timeout(port) == "HEADER_TIMEOUT"
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)
    text = output.decode()
    assert "auth: off" in text
    assert "file source inbox" in text
    assert process.returncode == 0, text[-2000:]


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
    gateway, collector, graph, edge = _free_ports(4)
    named_graph = _RecordingBackend()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CONCLAVE_", "RELDB_", "BUS_", "GATEWAY_", "GRAPH_", "COLLECTOR_"))
        and not key.startswith("EDGE_")
    }
    env.update(
        CONCLAVE_DATA_DIR=str(tmp_path), GATEWAY_PORT=str(gateway),
        COLLECTOR_API_PORT=str(collector), GRAPH_PORT=str(graph), EDGE_PORT=str(edge),
        GATEWAY_GRAPH_URL=named_graph.url,
    )  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "conclave.cli.main", "up"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        _wait_healthy([gateway, collector, graph, edge])
        searched = httpx.post(
            f"http://127.0.0.1:{gateway}/execute",
            json={"tool": "search_evidence", "args": {"limit": 5}},
        )
        assert searched.status_code == 200, searched.text
        assert searched.json()["status"] == "succeeded"
        dispatched = httpx.post(f"http://127.0.0.1:{graph}/dispatch", json={"query": "bridges"})
        assert dispatched.status_code == 200, dispatched.text
        assert dispatched.json()["degraded"] == []  # the collector step reached the collector
        httpx.post(
            f"http://127.0.0.1:{gateway}/execute",
            json={"tool": "dispatch_query", "args": {"query": "bridges"}},
        )
        assert named_graph.paths == ["/dispatch"]  # the explicit GATEWAY_GRAPH_URL was used
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)
        named_graph.close()
    assert process.returncode == 0, output.decode()[-2000:]


def _wait_healthy(ports: list[int]) -> None:
    deadline = time.monotonic() + 60
    healthy: set[int] = set()
    while time.monotonic() < deadline and len(healthy) < len(ports):
        for port in ports:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    healthy.add(port)
            except httpx.TransportError:
                pass
        time.sleep(0.3)
    assert healthy == set(ports)
