"""A media type added by a plug-in, installed the ordinary way (a distribution on ``sys.path`` with
a ``conclave.media_types`` entry point), reaches the client CLI, the gateway's evidence tools and
the edge's upload route without editing any of them (the recipe in CONTRIBUTING.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conclave import edge_client
from conclave.edge_client import Envelope, InvalidEnvelope, envelope
from tests.conftest import Backend, test_settings
from tests.edge.conftest import edge_app, edge_settings, form
from tests.gateway.conftest import run_gateway

PLUGIN = """
from conclave.edge.agents.base import CorruptMedia
from conclave.platform.media_types import MediaType, MiB


def sniff(head, size):
    return ("spc", "application/x-spectrum") if head.startswith(b"SPC1") else None


def extract(path, fmt, metadata):
    with open(path, "rb") as handle:
        lines = handle.read().decode("ascii").split()[1:]
    if not lines:
        raise CorruptMedia("The spectrum has no lines.")
    return {"type": fmt, "lines": len(lines)}


SPECTRUM = MediaType("spectrum", 5 * MiB, sniff=sniff, extract=extract)
"""


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    """A directory holding the installed plug-in: its module and its ``.dist-info``."""
    site = tmp_path / "site"
    info = site / "spectrum_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (site / "spectrum_plugin.py").write_text(PLUGIN, encoding="utf-8")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spectrum-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[conclave.media_types]\nspectrum = spectrum_plugin:SPECTRUM\n", encoding="utf-8"
    )
    return site


def conclave_edge(
    *args: str, tmp_path: Path, site: Path | None
) -> subprocess.CompletedProcess[str]:
    """``conclave edge ARGS`` in a new process; with ``site``, the plug-in is installed."""
    paths = [str(site)] if site else []
    paths += [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths),
        "CONCLAVE_EDGE_OUTBOX": str(tmp_path / "outbox.sqlite3"),
        "COLUMNS": "200",
    }
    command = [sys.executable, "-m", "conclave.cli.main", "edge", *args]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)


def test_the_client_cli_takes_a_plugin_type(tmp_path: Path, plugin: Path) -> None:
    sample = tmp_path / "reading.spc"
    sample.write_bytes(b"SPC1 656.3 486.1 434.0\n")

    refused = conclave_edge("enqueue", "spectrum", str(sample), tmp_path=tmp_path, site=None)
    assert refused.returncode == 2
    assert "Unknown source type 'spectrum'" in refused.stderr

    helped = conclave_edge("enqueue", "--help", tmp_path=tmp_path, site=plugin)
    assert "landscape, geo or spectrum" in helped.stdout
    queued = conclave_edge("enqueue", "spectrum", str(sample), tmp_path=tmp_path, site=plugin)
    assert queued.returncode == 0, queued.stderr
    assert f"queued #1 spectrum {sample}" in queued.stdout


def test_the_sdk_takes_a_plugin_type(
    plugin: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sample = tmp_path / "reading.spc"
    sample.write_bytes(b"SPC1 656.3 486.1 434.0\n")
    assert "spectrum" not in edge_client.SOURCE_TYPES
    with pytest.raises(InvalidEnvelope, match="Unknown source type 'spectrum'"):
        Envelope.for_file("spectrum", sample)

    monkeypatch.syspath_prepend(str(plugin))  # installing the plug-in, as pip would
    assert edge_client.SOURCE_TYPES[-2:] == ("geo", "spectrum")
    assert envelope.SOURCE_TYPES == edge_client.SOURCE_TYPES
    assert Envelope.for_file("spectrum", sample).path == sample


async def test_the_gateway_offers_a_plugin_type(
    backend: Backend, plugin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(plugin))  # installing the plug-in, as pip would
    async with run_gateway(backend, test_settings()) as client:
        listed = await client.get(
            "/tools",
            params={"format": "mcp", "names": "search_evidence", "include_unavailable": "true"},
        )
    [tool] = listed.json()["tools"]
    enum = tool["inputSchema"]["properties"]["type"]["enum"]
    assert enum == ["document", "image", "audio", "video", "cad", "landscape", "geo", "spectrum"]


async def test_the_edge_takes_uploads_of_a_plugin_type(
    backend: Backend, plugin: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(str(plugin))
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        created = await client.post(
            "/api/edge-intake/spectrum", **form(("reading.spc", b"SPC1 656.3 486.1\n"))
        )
        assert created.status_code == 200, created.text
        [evidence_id] = created.json()["evidence_ids"]
        pack = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()
        assert (pack["media_type"], pack["mime_type"]) == ("spectrum", "application/x-spectrum")
        assert pack["extracted"] == {"type": "spc", "lines": 2}

        refused = await client.post(
            "/api/edge-intake/spectrum", **form(("photo.png", b"\x89PNG\r\n\x1a\n" + b"0" * 64))
        )
        assert refused.status_code == 415
        assert refused.json()["code"] == "UNSUPPORTED_MEDIA_TYPE"
        figures = (await client.get("/api/edge-intake/pipeline")).json()
        assert figures["by_type"]["spectrum"] == 1
