"""The `file` source reads only regular files inside its inbox or a configured root (issue 15.4).

A discovery run used to read the service's own working folder (`.env` included): the default roots
held the current folder and the data folder. Paths are caller input naming the service's disk.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from conclave.collector.sources.file_access import REFUSED
from tests.collector.conftest import (
    collector_app,
    collector_settings,
    inbox,
    wait_terminal,
    write_jsonl,
)

ITEMS = [{"id": "a1", "title": "Red apple"}, {"id": "b2", "title": "Blue whale"}]


def _discovery(path: Any, **spec: Any) -> dict[str, Any]:
    source = {"type": "file", "path": path, "key": "id", **spec}
    return {"expedition_type": "discovery", "parameters": {"sources": [source]}}


async def _history_count(client: Any) -> int:
    return int((await client.get("/expedition/history")).json()["count"])


async def test_by_default_only_the_inbox_is_read(backend, tmp_path) -> None:
    data_dir = tmp_path / "data"
    settings = collector_settings(data_dir)
    (data_dir / "conclave.db").parent.mkdir(parents=True, exist_ok=True)
    (data_dir / "conclave.db").write_text("id\nsecret\n")
    async with collector_app(backend, settings) as (client, _app):
        assert (data_dir / "inbox").is_dir(), "the inbox is created at start-up"
        write_jsonl(data_dir / "inbox" / "items.jsonl", ITEMS)

        # The working folder and the data folder were roots before: neither is one now.
        for outside in (Path.cwd() / "pyproject.toml", data_dir / "conclave.db"):
            refused = await client.post(
                "/expedition/run", json=_discovery(str(outside), format="csv")
            )
            assert refused.status_code == 422, refused.text
            assert refused.json()["code"] == "FILE_REFUSED"

        # A relative path names a file in the inbox.
        accepted = await client.post("/expedition/run", json=_discovery("items.jsonl"))
        assert accepted.status_code == 202, accepted.text
        record = await wait_terminal(client, accepted.json()["expedition_id"])
        assert record["status"] == "completed", record["errors"]
        assert record["results"]["records"]["inserted"] == 2
        assert await _history_count(client) == 1


REFUSED_PATHS: list[Any] = [
    "/etc/passwd",
    ".env",
    "sub/.git/config",
    "../conclave.db",
    "./items.jsonl",
    "sub/../items.jsonl",
    "sub//items.jsonl",
    "items.jsonl/",
    "items.jsonl\x00.csv",
    "items\n.jsonl",
    "",
    42,
    None,
    ["items.jsonl"],
    "x" * 5000,
]


async def test_refused_paths_are_one_problem_and_queue_nothing(backend, tmp_path) -> None:
    folder = inbox(tmp_path)
    write_jsonl(folder / "items.jsonl", ITEMS)
    (folder / ".env").write_text("id\nCONCLAVE_API_TOKENS=secret\n")
    async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
        for path in REFUSED_PATHS:
            # Each path as given, and made absolute inside the inbox: refused just the same.
            absolute = f"{folder}/{path}" if isinstance(path, str) else path
            for given in (path, absolute):
                response = await client.post(
                    "/expedition/run", json=_discovery(given, format="csv")
                )
                assert response.status_code == 422, (given, response.text)
                problem = response.json()
                if "\x00" in str(given):  # refused at the boundary, before any source looks
                    assert problem["code"] == "UNSAFE_INPUT", given
                    continue
                assert problem["code"] == "FILE_REFUSED", given
                assert problem["detail"] == f"parameters.sources[0]: {REFUSED}"
                assert response.headers["content-type"].startswith("application/problem+json")
        assert await _history_count(client) == 0


async def test_absolute_paths_inside_a_root_with_a_dot_folder_above_it_are_read(
    backend, tmp_path
) -> None:
    # The default data folder is `.conclave`: hidden parts above a root are the operator's.
    data_dir = tmp_path / ".conclave"
    source = write_jsonl(inbox(data_dir) / "items.jsonl", ITEMS)
    extra = tmp_path / "exports"
    extra.mkdir()
    (extra / "more.csv").write_text("id,title\nc3,Green tea\n")
    settings = collector_settings(data_dir, file_roots=[extra])
    async with collector_app(backend, settings) as (client, _app):
        for path in (str(source), str(extra / "more.csv")):
            accepted = await client.post("/expedition/run", json=_discovery(path))
            assert accepted.status_code == 202, accepted.text
            record = await wait_terminal(client, accepted.json()["expedition_id"])
            assert record["status"] == "completed", record["errors"]


async def test_what_the_disk_holds_is_checked_when_the_expedition_runs(backend, tmp_path) -> None:
    folder = inbox(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.csv").write_text("id,token\n1,s3cr3t\n")
    write_jsonl(folder / "items.jsonl", ITEMS)
    (folder / ".hidden.jsonl").write_text('{"id": "h"}\n')
    (folder / "escape.csv").symlink_to(outside / "secret.csv")
    (folder / "dangling.csv").symlink_to(outside / "no-such-file.csv")
    (folder / "hidden-target.jsonl").symlink_to(folder / ".hidden.jsonl")
    (folder / "exports").symlink_to(outside, target_is_directory=True)
    (folder / "alias.jsonl").symlink_to(folder / "items.jsonl")
    os.mkfifo(folder / "pipe.csv")
    (folder / "folder.csv").mkdir()
    async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
        refused = [
            "escape.csv",
            "dangling.csv",
            "hidden-target.jsonl",
            "exports/secret.csv",
            "pipe.csv",  # would block a plain open() until a writer comes
            "folder.csv",
            "missing.csv",
        ]
        for path in refused:
            accepted = await client.post("/expedition/run", json=_discovery(path))
            assert accepted.status_code == 202, (path, accepted.text)
            record = await wait_terminal(client, accepted.json()["expedition_id"])
            assert record["status"] == "failed", path
            [error] = record["errors"]
            assert error["code"] == "FILE_REFUSED", (path, error)
            # One message for every reason: nothing tells what exists outside the roots.
            assert error["message"] == f"source file:{path} failed: {REFUSED}"

        # A symlink whose target stays inside the inbox is fine.
        accepted = await client.post("/expedition/run", json=_discovery("alias.jsonl"))
        record = await wait_terminal(client, accepted.json()["expedition_id"])
        assert record["status"] == "completed", record["errors"]
        assert (await client.get("/collections/default/records/a1")).status_code == 200
        secret = await client.get("/collections/default/records/1")
        assert secret.status_code == 404


async def test_a_file_larger_than_the_cap_fails_the_expedition(backend, tmp_path) -> None:
    folder = inbox(tmp_path)
    write_jsonl(folder / "big.jsonl", [{"id": i, "pad": "x" * 100} for i in range(10)])
    settings = collector_settings(tmp_path, file_max_bytes=500)
    async with collector_app(backend, settings) as (client, _app):
        accepted = await client.post("/expedition/run", json=_discovery("big.jsonl"))
        record = await wait_terminal(client, accepted.json()["expedition_id"])
        assert record["status"] == "failed"
        [error] = record["errors"]
        assert error["code"] == "FILE_TOO_LARGE"
        assert "500 bytes (COLLECTOR_FILE_MAX_BYTES)" in error["message"]
        listing = (await client.get("/collections")).json()
        assert listing["count"] == 0
