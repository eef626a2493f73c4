"""Malformed and hostile bodies are refused cleanly: a 4xx problem+json with a stable code, in
bounded time, without the service process's memory exploding.

Media parsing runs in worker processes with an address-space cap (``EDGE_PARSE_MEMORY_BYTES``), so
for files the proof that memory stayed bounded is the answer itself: a 4xx rather than a worker
killed mid-parse or a 500. The service process hosting the app is this test process; its peak RSS
is checked too.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Backend
from tests.hostile import payloads
from tests.hostile.conftest import AUTH, assert_problem, hostile_app

# "Does not hang", not a benchmark: generous for a loaded 2-core CI machine.
MAX_SECONDS = 10.0
# The service process may grow a little (a worker slot, caches), not by what a bomb inflates to.
MAX_RSS_GROWTH_BYTES = 256 * payloads.MiB
BOUNDARY = "hostile-boundary"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"
CLIENT_ERRORS = (400, 413, 415, 422)


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


async def _refused(
    client: httpx.AsyncClient,
    path: str,
    expect: int | tuple[int, ...] = CLIENT_ERRORS,
    **kwargs: Any,
) -> dict[str, Any]:
    headers = {**AUTH, **kwargs.pop("headers", {})}
    started = time.perf_counter()
    response = await client.post(path, headers=headers, **kwargs)
    elapsed = time.perf_counter() - started
    assert elapsed < MAX_SECONDS, f"{path} took {elapsed:.1f} s"
    return assert_problem(response, expect)


def _part(name: str, content: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return (
        (
            f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n"
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + content
        + b"\r\n"
    )


def _multipart(*parts: bytes) -> bytes:
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


async def test_malformed_and_truncated_multipart_is_refused(
    embedded: Backend, tmp_path: Path
) -> None:
    # Plain text: a document route would store a truncated copy of it as if it were complete.
    report = b"Field report: the dam is intact. " * 100
    whole = _multipart(_part("file", report, "report.txt"))
    headers_end = whole.index(b"\r\n\r\n") + 4
    cases: list[tuple[str, bytes, str, int, str]] = [
        ("no boundary", whole, "multipart/form-data", 415, "UNSUPPORTED_MEDIA_TYPE"),
        ("empty boundary", whole, "multipart/form-data; boundary=", 415, "UNSUPPORTED_MEDIA_TYPE"),
        ("not multipart at all", b"\x00\xff" * 100, MULTIPART, 400, "MALFORMED_MULTIPART"),
        ("empty body", b"", MULTIPART, 400, "TRUNCATED_UPLOAD"),
        ("truncated mid-file", whole[: headers_end + 100], MULTIPART, 400, "TRUNCATED_UPLOAD"),
        ("truncated in part headers", whole[:40], MULTIPART, 400, "TRUNCATED_UPLOAD"),
        ("no closing boundary", _part("file", report, "r.txt"), MULTIPART, 400, "TRUNCATED_UPLOAD"),
        (
            "endless part headers",
            f"--{BOUNDARY}\r\n".encode() + b"X-A: b\r\n" * 100_000,
            MULTIPART, 400, "MALFORMED_MULTIPART",
        ),
        (
            "header without colon",
            f"--{BOUNDARY}\r\nnonsense\r\n\r\nx\r\n".encode(),
            MULTIPART, 400, "MALFORMED_MULTIPART",
        ),
        (
            "no content-disposition",
            _multipart(f"--{BOUNDARY}\r\nContent-Type: text/plain\r\n\r\n".encode() + report
                       + b"\r\n"),
            MULTIPART, 422, "MISSING_FILE",
        ),
        (
            "huge metadata field",
            _multipart(_part("metadata", b"{" * 5 * payloads.MiB)),
            MULTIPART, 413, "FIELD_TOO_LARGE",
        ),
        (
            "too many parts",
            _multipart(*[_part("file", report, "r.txt")] * 200),
            MULTIPART, 413, "TOO_MANY_FILES",
        ),
    ]  # fmt: skip
    async with hostile_app("edge", embedded, tmp_path) as (client, _app):
        for label, body, content_type, status, code in cases:
            problem = await _refused(
                client,
                "/api/edge-intake/document",
                status,
                content=body,
                headers={"Content-Type": content_type},
            )
            assert problem["code"] == code, (label, problem)
        # A Content-Length larger than the body that follows is a truncated upload too.
        problem = await _refused(
            client,
            "/api/edge-intake/document",
            400,
            content=whole[: headers_end + 100],
            headers={"Content-Type": MULTIPART, "Content-Length": str(len(whole))},
        )
        assert problem["code"] == "TRUNCATED_UPLOAD"
        events = (await client.get("/api/edge-intake/events", headers=AUTH)).json()
        assert events["count"] == 0, "a refused upload left an Evidence Pack"
        complete = await _stored_content(client, whole)
        assert complete == report, "the well-formed upload is stored byte for byte"


async def _stored_content(client: httpx.AsyncClient, body: bytes) -> bytes:
    response = await client.post(
        "/api/edge-intake/document",
        content=body,
        headers={**AUTH, "Content-Type": MULTIPART},
    )
    assert response.status_code == 200, response.text
    [evidence_id] = response.json()["evidence_ids"]
    stored = await client.get(f"/api/edge-intake/evidence/{evidence_id}/content", headers=AUTH)
    return stored.content


async def test_bombs_in_uploaded_files_are_refused(embedded: Backend, tmp_path: Path) -> None:
    """Zip, decompression and entity-expansion bombs: each is a fast 422 ``CORRUPT_MEDIA``."""
    kml = payloads.kml_document()
    docx_parts = {"[Content_Types].xml": b"<Types/>", "_rels/.rels": b"<Relationships/>"}
    cases: list[tuple[str, str, bytes]] = [
        ("geo", "bomb.kmz", payloads.zip_bomb("doc.kml", 300 * payloads.MiB)),
        ("geo", "lying.kmz", payloads.lying_zip_bomb("doc.kml", 64 * payloads.MiB)),
        ("geo", "laughs.kml", payloads.billion_laughs("kml", 'xmlns="http://www.opengis.net/kml/2.2"')),
        ("geo", "laughs.gpx", payloads.billion_laughs("gpx", 'version="1.1" creator="x"')),
        ("geo", "nested.kmz", payloads.zipped({"doc.kml": payloads.billion_laughs("kml")})),
        ("document", "bomb.docx",
         payloads.zip_bomb("word/document.xml", 100 * payloads.MiB, docx_parts)),
        ("document", "lying.docx", payloads.lying_zip_bomb("word/document.xml", 64 * payloads.MiB)),
        ("image", "bomb.png", payloads.png_bomb()),
        ("image", "flood.jpg", payloads.jpeg_pixel_flood()),
        ("landscape", "bomb.png", payloads.png_bomb()),
        ("landscape", "flood.jpg", payloads.jpeg_pixel_flood()),
    ]  # fmt: skip
    before = _peak_rss_bytes()
    async with hostile_app("edge", embedded, tmp_path) as (client, _app):
        # A well-formed KML is accepted: the refusals below come from the bombs, not the route.
        ok = await client.post(
            "/api/edge-intake/geo", headers=AUTH, files={"file": ("ok.kml", kml)}
        )
        assert ok.status_code == 200, ok.text
        failures = []
        for media_type, name, content in cases:
            started = time.perf_counter()
            response = await client.post(
                f"/api/edge-intake/{media_type}", headers=AUTH, files={"file": (name, content)}
            )
            elapsed = time.perf_counter() - started
            kind = response.headers.get("content-type", "")
            body = response.json() if kind.startswith("application/problem+json") else {}
            # Every bomb gets past the sniffer: the parser itself must refuse it, as corrupt.
            if response.status_code != 422 or body.get("code") != "CORRUPT_MEDIA":
                failures.append(
                    f"{media_type}/{name}: {response.status_code} {response.text[:200]}"
                )
            elif elapsed > MAX_SECONDS:
                failures.append(f"{media_type}/{name}: answered after {elapsed:.1f} s")
        assert not failures, "bombs not refused cleanly:\n" + "\n".join(failures)
    growth = _peak_rss_bytes() - before
    assert growth < MAX_RSS_GROWTH_BYTES, f"service process grew by {growth // payloads.MiB} MiB"


DEPTH = 100_000  # far past any parser's recursion limit, well under the 1 MiB body cap


async def test_deeply_nested_json_is_refused_on_every_json_endpoint(
    embedded: Backend, tmp_path: Path
) -> None:
    nested_args = '{"tool": "echo", "args": {"message": ' + payloads.deep_json(DEPTH) + "}}"
    mcp_call = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", '
        '"arguments": {"message": ' + payloads.deep_json(DEPTH) + "}}}"
    )
    query = '{"query": "status", "entities": ' + payloads.deep_json(DEPTH) + "}"
    expedition = '{"expedition_type": "x", "parameters": ' + payloads.deep_object(DEPTH) + "}"
    json_cases: dict[str, list[tuple[str, str]]] = {
        "gateway": [
            ("/execute", payloads.deep_json(DEPTH)),
            ("/execute", payloads.deep_object(DEPTH)),
            ("/execute", nested_args),
            ("/mcp", payloads.deep_json(DEPTH)),
            ("/mcp", mcp_call),
        ],
        "collector": [
            ("/expedition/run", payloads.deep_object(DEPTH)),
            ("/expedition/run", expedition),
            ("/expedition/trigger/orchestrator", payloads.deep_json(DEPTH)),
            ("/schedules", payloads.deep_object(DEPTH)),
        ],
        "graph": [("/dispatch", payloads.deep_object(DEPTH)), ("/dispatch", query)],
    }
    json_headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        # The MCP endpoint guards against DNS rebinding: present a loopback Host it allows.
        "Host": "127.0.0.1:8000",
    }
    failures = []
    for service, cases in json_cases.items():
        async with hostile_app(service, embedded, tmp_path / service) as (client, _app):
            for path, body in cases:
                started = time.perf_counter()
                response = await client.post(path, content=body, headers={**AUTH, **json_headers})
                elapsed = time.perf_counter() - started
                if path == "/mcp":
                    # MCP speaks JSON-RPC: its stable code is the JSON-RPC error code.
                    answer = response.json()
                    clean = response.status_code == 400 and answer["error"]["code"] == -32700
                else:
                    kind = response.headers.get("content-type", "")
                    code = response.json().get("code") if "problem+json" in kind else None
                    clean = response.status_code in CLIENT_ERRORS and code not in (
                        None,
                        "INTERNAL_ERROR",
                    )
                if not clean or elapsed > MAX_SECONDS:
                    failures.append(f"{service} {path}: {response.status_code} {elapsed:.1f} s "
                                    f"{response.text[:200]}")  # fmt: skip
    assert not failures, "deep JSON not refused cleanly:\n" + "\n".join(failures)
    async with hostile_app("edge", embedded, tmp_path / "edge") as (client, _app):
        for metadata in (payloads.deep_json(DEPTH), payloads.deep_object(DEPTH)):
            problem = await _refused(
                client,
                "/api/edge-intake/image",
                files={"file": ("a.png", payloads.png_bomb(8, 8))},
                data={"metadata": metadata},
            )
            assert problem["code"] != "INTERNAL_ERROR"
