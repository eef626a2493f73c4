"""C2PA content credentials at intake: hostile manifests, remote manifests, tampering, limits.

The real-file corpus (``corpus/credentials.toml``) covers genuine signed, stripped and compressed
manifests; these tests cover what no public file shows: crafted JUMBF, a manifest URL pointing at
a server we watch, an image edited after signing, and files too large to read.
"""

from __future__ import annotations

import http.server
import io
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import c2pa
import pytest
from PIL import Image, PngImagePlugin

from conclave.edge.agents.credentials import MAX_CHECKED_BYTES, content_credentials
from tests.conftest import Backend, eventually
from tests.edge.conftest import CHANNEL, corpus_file, edge_app, edge_settings, form

# JUMBF description-box types: "c2pa" (manifest store), "c2ma" (manifest), "c2cl" (claim).
_STORE, _MANIFEST, _CLAIM = (
    bytes.fromhex(f"{kind.encode().hex()}00110010800000aa00389b71")
    for kind in ("c2pa", "c2ma", "c2cl")
)


def _box(kind: bytes, payload: bytes, size: int | None = None) -> bytes:
    return struct.pack(">I", 8 + len(payload) if size is None else size) + kind + payload


def _superbox(uuid: bytes, label: str, *children: bytes, size: int | None = None) -> bytes:
    description = _box(b"jumd", uuid + b"\x03" + label.encode() + b"\x00")
    return _box(b"jumb", description + b"".join(children), size)


def _jpeg_carrying(jumbf: bytes) -> bytes:
    """A small JPEG with ``jumbf`` in APP11 segments, as C2PA embeds a manifest store."""
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), "blue").save(buffer, "JPEG")
    jpeg = buffer.getvalue()
    segments, step = b"", 65000
    for sequence, start in enumerate(range(0, len(jumbf), step), start=1):
        # continuation segments repeat the box header (JPEG XT, ISO 18477-3)
        part = (jumbf[:8] if sequence > 1 else b"") + jumbf[start : start + step]
        payload = b"JP" + struct.pack(">HI", 1, sequence) + part
        segments += b"\xff\xeb" + struct.pack(">H", len(payload) + 2) + payload
    return jpeg[:2] + segments + jpeg[2:]


def _nested(depth: int) -> bytes:
    inner = b""
    for _ in range(depth):
        inner = _box(b"jumb", inner)
    return inner


HOSTILE = {
    "deep-nesting.jpg": _superbox(_STORE, "c2pa", _nested(5000)),
    "huge-declared-size.jpg": _superbox(
        _STORE, "c2pa", _superbox(_MANIFEST, "urn:uuid:1", size=0xFFFFFFF0)
    ),
    "huge-extended-size.jpg": _superbox(
        _STORE, "c2pa", _box(b"jumb", struct.pack(">Q", 1 << 62), size=1)
    ),
    "cbor-bomb.jpg": _superbox(
        _STORE,
        "c2pa",
        _superbox(
            _MANIFEST,
            "urn:uuid:1",
            # a CBOR array announcing 2**64 - 1 items
            _superbox(_CLAIM, "c2pa.claim", _box(b"cbor", b"\x9b" + b"\xff" * 8)),
        ),
    ),
}


async def _upload(client: Any, route: str, files: dict[str, bytes]) -> list[dict[str, Any]]:
    response = await client.post(f"/api/edge-intake/{route}", **form(list(files.items())))
    assert response.status_code == 200, response.text
    ids = response.json()["evidence_ids"]
    return [(await client.get(f"/api/edge-intake/evidence/{i}")).json()["extracted"] for i in ids]


async def test_crafted_manifests_are_reported_invalid_and_the_photo_is_kept(
    backend: Backend, tmp_path: Path
) -> None:
    files = {name: _jpeg_carrying(jumbf) for name, jumbf in HOSTILE.items()}
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        extracted = await _upload(client, "image", files)

        async def published() -> list[Any]:
            events = await backend.bus.read(CHANNEL)
            return events if len(events) == len(files) else []

        events = await eventually(published)
    for facts in extracted:
        assert (facts["format"], facts["width"]) == ("JPEG", 16)
        credentials = facts["content_credentials"]
        assert credentials["present"] is True
        assert credentials["validation"] == "invalid"
        assert credentials["error"]
    assert [event.payload["extracted"]["content_credentials"] for event in events] == [
        facts["content_credentials"] for facts in extracted
    ]


@pytest.fixture
def watched_server() -> Iterator[list[str]]:
    """A local HTTP server; the list collects the paths anyone requested."""
    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    requests.append(f"http://127.0.0.1:{server.server_address[1]}/manifest.c2pa")
    try:
        yield requests
    finally:
        server.shutdown()
        server.server_close()


async def test_a_remote_manifest_is_named_but_never_fetched(
    sqlite_engine: Any, memory_bus: Any, tmp_path: Path, watched_server: list[str]
) -> None:
    url = watched_server.pop()
    xmp = (
        '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
        'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description rdf:about="" '
        f'xmlns:dcterms="http://purl.org/dc/terms/" dcterms:provenance="{url}"/></rdf:RDF>'
        "</x:xmpmeta>"
    )
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", xmp)
    referring, plain, bitmap = io.BytesIO(), io.BytesIO(), io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(referring, "PNG", pnginfo=info)
    Image.new("RGB", (8, 8), "red").save(plain, "PNG")
    Image.new("RGB", (8, 8), "red").save(bitmap, "BMP")
    files = {"a.png": referring.getvalue(), "b.png": plain.getvalue(), "c.bmp": bitmap.getvalue()}
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        remote, none, unsupported = await _upload(client, "image", files)
    assert remote["content_credentials"] == {
        "present": True,
        "embedded": False,
        "remote_manifest_url": url,
        "validation": "unchecked",
    }
    assert watched_server == []  # c2pa's default would have fetched it
    assert none["content_credentials"] == {"present": False}
    assert "content_credentials" not in unsupported  # BMP cannot carry a manifest


async def test_a_photo_changed_after_signing_is_reported_invalid(
    sqlite_engine: Any, memory_bus: Any, tmp_path: Path
) -> None:
    signed = corpus_file(
        "pypi:c2pa-python==0.8.3",
        "c2pa_python-0.8.3/tests/fixtures/C.jpg",
        "4cbac1af485155f878d12a610da851c2938f2ce886189c61d9da7a0a43bd00b5",
    ).read_bytes()
    edited = bytearray(signed)
    edited[-5000] ^= 0x01  # one bit of the entropy-coded image data, far from the manifest
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        original, changed = await _upload(
            client, "image", {"C.jpg": signed, "C-edited.jpg": bytes(edited)}
        )
    assert original["content_credentials"]["validation"] == "untrusted"
    credentials = changed["content_credentials"]
    assert credentials["validation"] == "invalid"
    assert "assertion.dataHash.mismatch" in credentials["validation_failures"]
    assert credentials["signer"] == original["content_credentials"]["signer"]
    assert changed["width"] == original["width"] == 2048


def test_files_over_the_limit_are_not_read(tmp_path: Path) -> None:
    big = tmp_path / "big.jpg"
    with big.open("wb") as stream:
        stream.write(_jpeg_carrying(HOSTILE["cbor-bomb.jpg"]))
        stream.truncate(MAX_CHECKED_BYTES + 1)  # sparse: nothing is written to disk
    assert content_credentials(str(big)) == {
        "checked": False,
        "reason": "The file is larger than 256 MiB.",
    }


async def test_a_video_signed_with_the_c2pa_sdk_carries_its_credentials(
    sqlite_engine: Any, memory_bus: Any, tmp_path: Path
) -> None:
    """No registry ships a C2PA video, so a real MP4 (pymediainfo's sample) is signed here with the
    official SDK and the test certificate c2pa-python publishes, declaring AI generation."""
    movie = corpus_file(
        "pypi:pymediainfo==7.0.1",
        "pymediainfo-7.0.1/tests/data/sample.mp4",
        "3cde735feab9d484365777ca77d09e0fd7e9ecf853375a38884ee20178693bcc",
    )
    certificate = corpus_file(
        "pypi:c2pa-python==0.8.3",
        "c2pa_python-0.8.3/tests/fixtures/es256_certs.pem",
        "f18a293626ac261b18201e269ee0ed9c10bc30afb3b5c8708bb16e41a05bf040",
    )
    key = corpus_file(
        "pypi:c2pa-python==0.8.3",
        "c2pa_python-0.8.3/tests/fixtures/es256_private.key",
        "f547ec8dbf24e50b51cf9924e58c250d246ed8844304408a072801fcf70a95d7",
    )
    manifest = {
        "claim_generator_info": [{"name": "conclave-test", "version": "1.0"}],
        "assertions": [
            {
                "label": "c2pa.actions",
                "data": {
                    "actions": [
                        {
                            "action": "c2pa.created",
                            "digitalSourceType": "http://cv.iptc.org/newscodes/"
                            "digitalsourcetype/trainedAlgorithmicMedia",
                        }
                    ]
                },
            }
        ],
    }
    signer = c2pa.Signer.from_info(
        c2pa.C2paSignerInfo(b"es256", certificate.read_bytes(), key.read_bytes(), None)
    )
    signed = tmp_path / "signed.mp4"
    with movie.open("rb") as source, signed.open("w+b") as dest:
        c2pa.Builder(manifest).sign(signer, "video/mp4", source, dest)

    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path / "edge")) as (client, _app):
        response = await client.post(
            "/api/edge-intake/video", **form(("signed.mp4", signed.read_bytes()))
        )
        assert response.status_code == 200, response.text
        [evidence_id] = response.json()["evidence_ids"]
        pack = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()
    credentials = pack["extracted"]["content_credentials"]
    assert credentials["present"] is True
    assert credentials["validation"] == "untrusted"  # intact, but no trust list is configured
    assert credentials["claim_generator"].startswith("conclave-test")
    assert credentials["ai_generated"] is True
    assert [a["action"] for a in credentials["actions"]] == ["c2pa.created"]
    assert pack["extracted"]["video_codecs"]  # still described as the video it is

    events = await eventually(lambda: memory_bus.read(CHANNEL))
    assert events[0].payload["extracted"]["content_credentials"]["ai_generated"] is True
