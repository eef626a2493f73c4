"""``conclave edge``: bad input refused with exit code 2, status, sync over a real socket."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conclave.cli.main import app
from tests.conftest import Backend
from tests.edge_client.conftest import (
    edge_server,
    free_port,
    media_files,
    server_packs,
    socket_server,
)

runner = CliRunner()


def edge(outbox: Path, *args: str, **env: str) -> object:
    """Run ``conclave edge ARGS`` with ``outbox`` from the environment, as a device would."""
    environment = {"CONCLAVE_EDGE_OUTBOX": str(outbox), "CORE_EDGE_API_TOKEN": "", **env}
    return runner.invoke(app, ["edge", *args], env=environment)


def counts(outbox: Path) -> dict[str, int]:
    result = edge(outbox, "status", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["counts"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["enqueue", "photo", "{file}"], "Unknown source type 'photo'"),
        (["enqueue", "image", "{dir}"], "is a directory"),
        (["enqueue", "image", "{missing}"], "does not exist"),
        (["enqueue", "image", "{empty}"], "is empty"),
        (["enqueue", "image", "{file}", "--metadata", "[1, 2]"], "not an array"),
        (["enqueue", "image", "{file}", "--metadata", "oops"], "not valid JSON"),
        (["enqueue", "image", "{file}", "{missing}"], "does not exist"),
        (["retry"], "give item ids or --all"),
    ],
)
def test_bad_input_is_refused_with_exit_code_2_and_nothing_stored(tmp_path, args, message):
    [file] = media_files(tmp_path / "media", 1)
    (tmp_path / "empty.png").touch()
    names = {
        "file": str(file),
        "dir": str(tmp_path / "media"),
        "missing": str(tmp_path / "gone.png"),
        "empty": str(tmp_path / "empty.png"),
    }
    outbox = tmp_path / "outbox.sqlite3"
    result = edge(outbox, *(arg.format(**names) for arg in args))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not outbox.exists()  # refused before the outbox was even opened


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_is_refused(tmp_path):
    [file] = media_files(tmp_path / "media", 1)
    file.chmod(0)
    result = edge(tmp_path / "outbox.sqlite3", "enqueue", "image", str(file))
    assert result.exit_code == 2 and "cannot be read" in result.output


def test_a_fifo_is_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    result = edge(tmp_path / "outbox.sqlite3", "enqueue", "image", str(fifo))
    assert result.exit_code == 2 and "not a regular file" in result.output


def test_enqueue_status_retry_and_device(tmp_path):
    outbox = tmp_path / "box" / "outbox.sqlite3"
    files = media_files(tmp_path / "media", 2)
    result = edge(outbox, "enqueue", "IMAGE", *map(str, files), "--metadata", '{"lat": 45.1}')
    assert result.exit_code == 0, result.output
    assert "queued #1 image" in result.output and "queued #2 image" in result.output
    assert counts(outbox) == {"PENDING": 2, "SENT": 0, "FAILED": 0, "retrying": 0, "sending": 0}

    table = edge(outbox, "status")
    assert table.exit_code == 0 and "PENDING" in table.output and "FAILED" in table.output

    first, second = edge(outbox, "device"), edge(outbox, "device")
    assert first.exit_code == 0 and "device_id" in first.output
    assert first.output == second.output  # persistent
    assert edge(outbox, "retry", "--all").output.startswith("0 item(s)")


def test_a_corrupt_outbox_is_reported_not_replaced(tmp_path):
    outbox = tmp_path / "outbox.sqlite3"
    garbage = b"this is not a database" * 100
    outbox.write_bytes(garbage)
    result = edge(outbox, "status")
    assert result.exit_code == 1
    assert "damaged or not an outbox" in result.output
    assert outbox.read_bytes() == garbage


async def test_cli_sync_over_a_socket_then_cleanup(backend: Backend, tmp_path) -> None:
    outbox = tmp_path / "outbox.sqlite3"
    files = media_files(tmp_path / "media", 12)
    assert edge(outbox, "enqueue", "image", *map(str, files)).exit_code == 0
    async with edge_server(backend, tmp_path / "server") as app_, socket_server(app_) as port:
        # The CLI runs its own event loop: give it a thread while this loop serves.
        env = {"CORE_EDGE_API_URL": f"http://127.0.0.1:{port}"}
        result = await asyncio.to_thread(edge, outbox, "sync", **env)
    assert result.exit_code == 0, result.output
    assert "sent 12" in result.output
    assert counts(outbox)["SENT"] == 12
    assert len(await server_packs(backend)) == 12
    assert "removed 12" in edge(outbox, "cleanup").output
    assert counts(outbox)["SENT"] == 0


def test_cli_sync_to_an_unreachable_server_exits_1(tmp_path):
    outbox = tmp_path / "outbox.sqlite3"
    assert edge(outbox, "enqueue", "image", *map(str, media_files(tmp_path, 2))).exit_code == 0
    url = f"http://127.0.0.1:{free_port()}"
    result = edge(outbox, "sync", "--server", url, "--concurrency", "1")
    assert result.exit_code == 1
    assert "stopped early" in result.output
    status = counts(outbox)
    assert (status["FAILED"], status["retrying"], status["PENDING"]) == (1, 1, 1)


async def test_two_sync_processes_at_once_send_each_item_once(sqlite_engine, memory_bus, tmp_path):
    backend = Backend("embedded", sqlite_engine, memory_bus)
    outbox = tmp_path / "outbox.sqlite3"
    assert edge(outbox, "enqueue", "image", *map(str, media_files(tmp_path, 30))).exit_code == 0
    async with edge_server(backend, tmp_path / "server") as app_, socket_server(app_) as port:
        command = [sys.executable, "-m", "conclave.cli.edge", "sync", "--outbox"]
        env = {**os.environ, "CORE_EDGE_API_URL": f"http://127.0.0.1:{port}"}
        processes = [
            await asyncio.create_subprocess_exec(
                *command, str(outbox), env=env, stdout=asyncio.subprocess.PIPE
            )
            for _ in range(2)
        ]
        outputs = [(await process.communicate())[0].decode() for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    packs = await server_packs(backend)
    assert len(packs) == 30 and all(len(ids) == 1 for ids in packs.values())
    assert "already on the server" not in "".join(outputs)  # no item was sent twice
    assert counts(outbox)["SENT"] == 30
