"""Small file parts held in memory (docs/edge.md "Small files"): the room they take is bounded
and always given back, a part that grows spills to its temporary file whole, and a small single
file is written, parsed and stored beside its blob without leaving anything else behind, whatever
its parse's outcome."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

import pytest

from conclave.edge.blobs import MEMORY_PARTS_BYTES, SMALL_PART_BYTES, BlobStore
from conclave.edge.parsing import ParserPool
from conclave.platform.errors import Unprocessable
from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings, form


def _leftovers(root: Path) -> list[Path]:
    """Files under the store that are neither a blob at its content address nor a folder."""
    found = [path for path in root.rglob("*") if path.is_file()]
    return [path for path in found if path.parent.parent.parent.name != "sha256"
            or path.name.startswith(".")]  # fmt: skip


def test_a_small_part_stays_in_memory_and_a_growing_one_spills_whole(tmp_path: Path) -> None:
    store = BlobStore(tmp_path, fsync=False)
    store.open()
    part = store.new_temp(10 * SMALL_PART_BYTES)
    first = os.urandom(SMALL_PART_BYTES)
    part.write(first[:1000])
    part.write(first[1000:])
    assert part.data == first and not part.path.exists()
    assert store.memory_free == MEMORY_PARTS_BYTES - SMALL_PART_BYTES

    more = os.urandom(5000)
    part.write(more)  # past the size held in memory: every byte goes to the file, in order
    part.close()
    assert part.data is None
    assert part.path.read_bytes() == first + more
    assert part.sha256 == hashlib.sha256(first + more).hexdigest()
    assert store.memory_free == MEMORY_PARTS_BYTES
    part.discard()
    assert not part.path.exists()


def test_parts_past_the_memory_budget_go_to_disk_and_discards_give_room_back(
    tmp_path: Path,
) -> None:
    store = BlobStore(tmp_path, fsync=False, memory_bytes=2 * SMALL_PART_BYTES)
    store.open()
    held = [store.new_temp(SMALL_PART_BYTES) for _ in range(2)]
    spilled = store.new_temp(SMALL_PART_BYTES)
    for part in (*held, spilled):
        part.write(b"tile")
    assert [part.data for part in held] == [b"tile", b"tile"]
    assert spilled.data is None and spilled.path.exists()  # on disk from its first byte
    assert store.memory_free == 0

    held[0].discard()
    held[0].discard()  # twice: the room is given back once
    assert store.memory_free == SMALL_PART_BYTES
    assert held[1].on_disk().read_bytes() == b"tile"  # written out for a multi-file upload
    assert store.memory_free == 2 * SMALL_PART_BYTES
    for part in (*held, spilled):
        part.discard()
    assert store.memory_free == 2 * SMALL_PART_BYTES
    assert not list((tmp_path / "tmp").iterdir())


async def test_a_small_upload_leaves_its_read_only_blob_and_nothing_else(
    backend: Backend, tmp_path: Path
) -> None:
    image = samples.png()
    assert len(image) <= SMALL_PART_BYTES
    settings = edge_settings(tmp_path, fsync_blobs=True)
    async with edge_app(backend, settings) as (client, app):
        blobs = app.state.edge.blobs
        for _ in range(2):  # the second is the same content: stored once
            response = await client.post("/api/edge-intake/image", **form(("a.png", image)))
            assert response.status_code == 200, response.text
        blob = blobs.path_for(hashlib.sha256(image).hexdigest())
        assert blob.read_bytes() == image
        assert stat.S_IMODE(blob.stat().st_mode) == 0o444
        assert _leftovers(blobs.root) == []
        assert blobs.memory_free == MEMORY_PARTS_BYTES
        [evidence_id] = response.json()["evidence_ids"]
        verified = (await client.get(f"/api/edge-intake/evidence/{evidence_id}/verify")).json()
        assert verified["content"]["ok"] is True, verified  # its stored bytes hash to its address


async def test_refused_small_files_leave_nothing_in_the_store(
    backend: Backend, tmp_path: Path
) -> None:
    corrupt = samples.png()[:-20] + b"\x00" * 20  # the last chunk's CRC no longer matches
    async with edge_app(backend, edge_settings(tmp_path)) as (client, app):
        blobs = app.state.edge.blobs
        refused = await client.post("/api/edge-intake/image", **form(("a.png", corrupt)))
        assert refused.status_code == 422, refused.text
        assert refused.json()["code"] == "CORRUPT_MEDIA"
        mismatch = await client.post("/api/edge-intake/image", **form(("a.png", samples.pdf())))
        assert mismatch.status_code == 415, mismatch.text
        assert _leftovers(blobs.root) == []
        assert not (blobs.root / "sha256").exists() or not any(
            path.is_file() for path in (blobs.root / "sha256").rglob("*")
        )
        assert blobs.memory_free == MEMORY_PARTS_BYTES


async def test_a_small_file_whose_parse_outlasts_its_limit_leaves_no_file(tmp_path: Path) -> None:
    point = '{"type":"Feature","geometry":{"type":"Point","coordinates":[1.0,2.0]}},'
    slow = ('{"type":"FeatureCollection","features":[' + point * 1499 + point[:-1] + "]}").encode()
    assert len(slow) <= SMALL_PART_BYTES
    beside = tmp_path / "sha256" / "ab" / "cd" / ".probe.part"
    pool = ParserPool(1, timeout=30, memory_bytes=2 * 1024**3)
    try:
        with pytest.raises(Unprocessable) as caught:
            await pool.parse_bytes("geo", slow, beside, "geojson", {}, time_limit=0.001)
        assert caught.value.code == "PARSE_TIMEOUT"
        assert not beside.exists()
        # The replaced worker parses the same bytes, and leaves the file for its blob.
        facts = await pool.parse_bytes("geo", slow, beside, "geojson", {}, fsync=False)
        assert facts["feature_count"] == 1500
        assert beside.read_bytes() == slow
    finally:
        await pool.close()


def test_stale_files_beside_blobs_are_swept_at_start(tmp_path: Path) -> None:
    folder = tmp_path / "sha256" / "ab" / "cd"
    folder.mkdir(parents=True)
    stale, fresh = folder / ".stale.part", folder / ".fresh.part"
    blob = folder / ("abcd" + "0" * 60)
    for path in (stale, fresh, blob):
        path.write_bytes(b"x")
    two_days_ago = time.time() - 2 * 86400
    os.utime(stale, (two_days_ago, two_days_ago))
    os.utime(blob, (two_days_ago, two_days_ago))
    BlobStore(tmp_path).open()
    assert sorted(path.name for path in folder.iterdir()) == sorted([fresh.name, blob.name])
