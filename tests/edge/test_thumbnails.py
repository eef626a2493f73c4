"""Thumbnails, ``GET /api/edge-intake/evidence/{id}/thumbnail``: a small WebP of an image or
landscape pack, made by a parser worker once and kept; for the uploader and operators only; a
clear 404 ``NO_THUMBNAIL`` for a pack that has none, never a 500 or a hung worker."""

from __future__ import annotations

import io
import struct
import zlib
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import tifffile
from PIL import Image

from conclave.platform.bus.memory import MemoryBus
from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings, form
from tests.edge.test_pack_ownership import ALICE, BOB, OLGA, PEOPLE

EDGE = "/api/edge-intake"


@pytest.fixture
def embedded(sqlite_engine, memory_bus: MemoryBus) -> Backend:
    return Backend("embedded", sqlite_engine, memory_bus)


def _real_png() -> bytes:
    """ezdxf's 256 px application icon: a real PNG shipped by an installed package."""
    return resources.files("ezdxf").joinpath("resources/256x256.png").read_bytes()


def _saved(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


async def _upload(client, route: str, name: str, content: bytes, headers=None) -> str:
    answer = await client.post(f"{EDGE}/{route}", **form((name, content)), headers=headers or {})
    assert answer.status_code == 200, answer.text
    [evidence_id] = answer.json()["evidence_ids"]
    return evidence_id


def _picture(answer) -> Image.Image:
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "image/webp"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["cache-control"] == "private, max-age=86400"
    image = Image.open(io.BytesIO(answer.content))
    assert image.format == "WEBP"
    assert max(image.size) <= 256
    return image


async def test_thumbnails_of_real_and_awkward_images(embedded: Backend, tmp_path: Path) -> None:
    """A real PNG, a GPS-tagged JPEG, CMYK, 16-bit grey, palette with transparency, LA, an
    animated GIF, a 16-bit RGB TIFF Pillow has no mode for and a GeoTIFF each get a thumbnail of
    their shape; the second request is served from the kept file."""
    wide = Image.new("RGB", (1200, 300), (200, 30, 30))
    palette = Image.new("P", (40, 40), 0)  # half transparent black, half red
    palette.putpalette([0, 0, 0, 255, 0, 0])
    palette.paste(1, (0, 0, 20, 40))
    frames = [Image.new("P", (50, 20), colour) for colour in (1, 2, 3)]
    gif = io.BytesIO()
    frames[0].save(gif, "GIF", save_all=True, append_images=frames[1:])
    rgb16 = io.BytesIO()
    tifffile.imwrite(rgb16, np.arange(600 * 3, dtype=np.uint16).reshape(20, 30, 3) * 30)
    cases = [
        ("image", "icon.png", _real_png(), (256, 256), "RGB"),
        ("image", "gps.jpg", samples.jpeg_with_gps(), (256, 192), "RGB"),
        ("image", "wide.jpg", _saved(wide, "JPEG"), (256, 64), "RGB"),
        (
            "image",
            "cmyk.jpg",
            _saved(Image.new("CMYK", (64, 48), (0, 255, 0, 0)), "JPEG"),
            (64, 48),
            "RGB",
        ),
        (
            "image",
            "grey16.png",
            _saved(Image.new("I;16", (300, 100), 40000), "PNG"),
            (256, 85),
            None,
        ),
        ("image", "palette.png", _saved(palette, "PNG", transparency=0), (40, 40), "RGBA"),
        ("image", "la.png", _saved(Image.new("LA", (10, 20), (9, 128)), "PNG"), (10, 20), "RGBA"),
        ("image", "moving.gif", gif.getvalue(), (50, 20), None),
        ("image", "rgb16.tif", rgb16.getvalue(), (30, 20), "RGB"),
        ("landscape", "map.tif", samples.geotiff(), None, None),
    ]
    async with edge_app(embedded, edge_settings(tmp_path)) as (client, app):
        for route, name, content, size, mode in cases:
            evidence_id = await _upload(client, route, name, content)
            image = _picture(await client.get(f"{EDGE}/evidence/{evidence_id}/thumbnail"))
            if size is not None:
                assert image.size == size, name
            if mode is not None:
                assert image.mode == mode, name
        red = _picture(await client.get(f"{EDGE}/evidence/{evidence_id}/thumbnail"))
        assert red.size == image.size  # the kept one
        kept = list((tmp_path / "blobs" / "thumbnails" / "v1").rglob("*.webp"))
        assert len(kept) == len(cases)
        # Kept means kept: the thumbnail is served from the file, not made again.
        wide_id = await _upload(client, "image", "wide-again.jpg", _saved(wide, "JPEG"))
        sha = (await client.get(f"{EDGE}/evidence/{wide_id}")).json()["sha256"]
        path = app.state.edge.thumbnails.path_for(sha)
        path.chmod(0o644)
        path.write_bytes(_saved(Image.new("RGB", (7, 7)), "WEBP"))
        assert _picture(await client.get(f"{EDGE}/evidence/{wide_id}/thumbnail")).size == (7, 7)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


async def test_packs_without_a_thumbnail_get_a_clear_404(embedded: Backend, tmp_path: Path) -> None:
    """A PDF, a PNG declaring 100 Mpx in a few bytes (past the decode limit) and a truncated
    JPEG each get NO_THUMBNAIL with a reason; a refusal is kept, and the worker still serves the
    next pack."""
    header = struct.pack(">IIBBBBB", 10_000, 10_000, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 10_001 * 2)  # two rows of the 10,000: the rest is missing
    bomb = b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", idat)
    bomb += _png_chunk(b"IEND", b"")
    async with edge_app(embedded, edge_settings(tmp_path)) as (client, _app):
        document = await _upload(client, "document", "report.pdf", samples.pdf())
        answer = await client.get(f"{EDGE}/evidence/{document}/thumbnail")
        assert answer.status_code == 404
        assert answer.json()["code"] == "NO_THUMBNAIL"
        assert "document packs" in answer.json()["detail"]
        # The upload checks refuse such files: they are written over a real pack's blob here,
        # as a blob store that went bad (or a parser that let one through) would hold them.
        evidence_id = await _upload(client, "image", "small.png", samples.png(8, 8))
        pack = (await client.get(f"{EDGE}/evidence/{evidence_id}")).json()
        blob = tmp_path / "blobs" / "sha256" / pack["sha256"][:2] / pack["sha256"][2:4]
        target = blob / pack["sha256"]
        target.chmod(0o644)
        target.write_bytes(bomb)
        for _ in range(2):  # made once, then the kept refusal
            answer = await client.get(f"{EDGE}/evidence/{evidence_id}/thumbnail")
            assert answer.status_code == 404, answer.text
            assert answer.json()["code"] == "NO_THUMBNAIL"
            assert "100,000,000 pixels" in answer.json()["detail"]
        assert list((tmp_path / "blobs" / "thumbnails").rglob("*.none"))
        # A truncated JPEG (the tail of its scan cut off) gets no thumbnail either.
        photo = samples.jpeg_with_gps()
        other = await _upload(
            client, "image", "other.jpg", _saved(Image.new("RGB", (640, 480), (1, 2, 3)), "JPEG")
        )
        pack = (await client.get(f"{EDGE}/evidence/{other}")).json()
        target = (
            tmp_path
            / "blobs"
            / "sha256"
            / pack["sha256"][:2]
            / pack["sha256"][2:4]
            / pack["sha256"]
        )
        target.chmod(0o644)
        target.write_bytes(photo[: len(photo) // 2])
        answer = await client.get(f"{EDGE}/evidence/{other}/thumbnail")
        assert answer.status_code == 404, answer.text
        assert answer.json()["code"] == "NO_THUMBNAIL"
        # The worker still works.
        fine = await _upload(client, "image", "fine.png", _real_png())
        _picture(await client.get(f"{EDGE}/evidence/{fine}/thumbnail"))


async def test_only_the_uploader_and_operators_see_a_thumbnail(
    embedded: Backend, tmp_path: Path
) -> None:
    async with edge_app(embedded, edge_settings(tmp_path, **PEOPLE)) as (client, _app):
        evidence_id = await _upload(client, "image", "icon.png", _real_png(), ALICE)
        path = f"{EDGE}/evidence/{evidence_id}/thumbnail"
        _picture(await client.get(path, headers=ALICE))
        _picture(await client.get(path, headers=OLGA))
        answer = await client.get(path, headers=BOB)
        assert answer.status_code == 404
        assert answer.json()["code"] == "EVIDENCE_NOT_FOUND"
        assert (await client.get(path)).status_code == 401
        missing = await client.get(f"{EDGE}/evidence/nope/thumbnail", headers=OLGA)
        assert missing.json()["code"] == "EVIDENCE_NOT_FOUND"


async def test_a_thumbnail_past_the_time_limit_is_none_and_the_worker_replaced(
    embedded: Backend, tmp_path: Path
) -> None:
    """A large image (24 Mpx) under a time limit it cannot meet: 404 NO_THUMBNAIL saying so,
    the refusal kept, the killed worker replaced; with the usual limit, a fresh cache makes
    it."""
    # (row // 16 + column // 25) % 256 from one column and one row of it: a sum of uint8 wraps at
    # 256 (a 4000 x 6400 grid of indices took seconds to build).
    down = (np.arange(4000) // 16).astype(np.uint8)
    across = (np.arange(6400) // 25).astype(np.uint8)
    ramp = down[:, None] + across
    content = _saved(Image.fromarray(ramp).convert("RGB"), "PNG")
    async with edge_app(embedded, edge_settings(tmp_path)) as (client, _app):
        evidence_id = await _upload(client, "image", "survey.png", content)
        small = await _upload(client, "image", "icon.png", _real_png())
    hurried = edge_settings(tmp_path, parse_timeout_seconds=0.05)
    async with edge_app(embedded, hurried) as (client, app):
        answer = await client.get(f"{EDGE}/evidence/{evidence_id}/thumbnail")
        assert answer.status_code == 404, answer.text
        assert answer.json()["code"] == "NO_THUMBNAIL"
        assert "longer than allowed" in answer.json()["detail"]
        assert list((tmp_path / "blobs" / "thumbnails").rglob("*.none"))
        pids = app.state.parsers.worker_pids()
        assert len(pids) <= 1  # the one that timed out was killed and dropped
    async with edge_app(embedded, edge_settings(tmp_path)) as (client, _app):
        for kept in (tmp_path / "blobs" / "thumbnails").rglob("*.none"):
            kept.unlink()  # the cache is only a cache
        image = _picture(await client.get(f"{EDGE}/evidence/{evidence_id}/thumbnail"))
        assert image.size == (256, 160)
        _picture(await client.get(f"{EDGE}/evidence/{small}/thumbnail"))
