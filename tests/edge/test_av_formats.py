"""Crafted audio and video files: headers that lie about sizes, streams or tags get a 4xx or an
honest description, never a crash or a worker that reads what the header promises.

Real files (cut-off recordings, camera movies, audio in MP4 and Ogg) are in the corpus
(``tests/edge/corpus/audio.toml`` and ``video.toml``).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings, form

_FMT = b"fmt " + struct.pack("<IHHIIHH", 16, 1, 2, 44_100, 4 * 44_100, 4, 16)


def _wav(data: bytes, declared: int, trailer: bytes = b"") -> bytes:
    size = 36 + len(data) + len(trailer)
    return (
        b"RIFF"
        + struct.pack("<I", size)
        + b"WAVE"
        + _FMT
        + b"data"
        + struct.pack("<I", declared)
        + data
        + trailer
    )


def _crc8(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _flac_claiming_an_hour() -> bytes:
    """STREAMINFO of a 1-hour mono 44.1 kHz stream, then the start of its first frame only."""
    total = 3600 * 44_100
    info = struct.pack(">HH", 192, 192) + b"\x00\x00\x00" + b"\x00\x10\x00"
    info += (44_100 << 44 | 0 << 41 | 15 << 36 | total).to_bytes(8) + b"\x00" * 16
    header = b"\xff\xf8\x19\x08\x00"  # 192 samples, 44.1 kHz, mono, 16 bits, frame 0
    return b"fLaC" + b"\x80" + len(info).to_bytes(3) + info + header + bytes([_crc8(header)])


def _tagged_wav(tag_bytes: int) -> bytes:
    """One second of silence and an ``id3`` chunk of ``tag_bytes`` (a tag of padding)."""
    body = tag_bytes - 10
    syncsafe = bytes((body >> shift) & 0x7F for shift in (21, 14, 7, 0))
    tag = b"ID3\x03\x00\x00" + syncsafe + b"\x00" * body
    return _wav(bytes(4 * 44_100), 4 * 44_100, b"id3 " + struct.pack("<I", tag_bytes) + tag)


async def _upload(client: Any, route: str, name: str, content: bytes) -> Any:
    return await client.post(f"/api/edge-intake/{route}", **form((name, content)))


async def _extracted(client: Any, response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    [evidence_id] = response.json()["evidence_ids"]
    pack = (await client.get(f"/api/edge-intake/evidence/{evidence_id}")).json()
    return pack["extracted"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("route", "name", "content", "status"),
    [
        # A movie box whose only child claims 4 GiB: sniffed as QuickTime, no track inside.
        ("video", "clip.mov", b"\x00\x00\x00\x10moov\xff\xff\xff\xffmvhd", 422),
        ("audio", "clip.mov", b"\x00\x00\x00\x10moov\xff\xff\xff\xffmvhd", 422),
        # An Ogg first page that promises a 255-byte packet and ends.
        ("audio", "a.ogg", b"OggS\x00\x02" + bytes(20) + b"\x01\xff\x01vorbis", 422),
        ("video", "a.ogv", b"OggS\x00\x02" + bytes(20) + b"\x01\xff\x80theora", 422),
        # "free" then garbage: not a QuickTime movie after all.
        ("video", "x.mov", b"\x00\x00\x00\x08free" + b"\x00\x00\x00\x08JUNK" + bytes(32), 415),
    ],
    ids=["moov-video", "moov-audio", "ogg-audio", "ogg-video", "free-junk"],
)
async def test_crafted_containers_are_refused_with_a_problem(
    backend: Backend, tmp_path, route, name, content, status
):
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        response = await _upload(client, route, name, content)
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/problem+json"


async def test_files_shorter_than_their_headers_say_are_flagged_with_what_they_hold(
    backend: Backend, tmp_path
):
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        # A WAV header announcing 2 GiB of audio, and a quarter second of it.
        wav = await _extracted(
            client, await _upload(client, "audio", "cut.wav", _wav(bytes(44_100), 0x7FFF_FFF0))
        )
        flac = await _extracted(
            client, await _upload(client, "audio", "cut.flac", _flac_claiming_an_hour())
        )
    assert wav["truncated"] is True
    assert wav["duration_s"] == 0.25
    assert flac["truncated"] is True
    assert flac["duration_s"] == 0.0


async def test_a_huge_tag_is_not_read_whole_and_the_audio_is_still_described(
    backend: Backend, tmp_path
):
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        response = await _upload(client, "audio", "tagged.wav", _tagged_wav(17 * 1024 * 1024))
        extracted = await _extracted(client, response)
    assert extracted["duration_s"] == 1.0
    assert (extracted["sample_rate_hz"], extracted["channels"]) == (44_100, 2)
    assert extracted["truncated"] is False
    assert "tags" not in extracted


def _vbr_mp3_cut_in_half(frames: int = 6000) -> bytes:
    """A 128 kbit/s MPEG-1 Layer III stream whose Xing header (with a linear table of contents)
    states twice the frames and bytes the file holds: more frames than are counted one by one."""
    header = b"\xff\xfb\x90\x00"  # MPEG-1 Layer III, 128 kbit/s, 44.1 kHz, no padding: 417 bytes
    frame = header + bytes(413)
    toc = bytes(i * 256 // 100 for i in range(100))
    xing = b"Xing" + struct.pack(">III", 7, 2 * frames, 2 * frames * len(frame)) + toc
    first = header + bytes(32) + xing
    return first + bytes(len(frame) - len(first)) + frame * (frames - 1)


async def test_a_cut_off_vbr_mp3_reports_the_share_its_header_table_gives(
    backend: Backend, tmp_path
):
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        response = await _upload(client, "audio", "cut.mp3", _vbr_mp3_cut_in_half())
        extracted = await _extracted(client, response)
    stated = 12_000 * 1152 / 44_100  # what the Xing header says: 313.5 s
    assert extracted["truncated"] is True
    assert extracted["duration_s"] == pytest.approx(stated / 2, abs=0.5)


async def test_a_matroska_file_cut_short_of_its_segment_is_flagged(backend: Backend, tmp_path):
    whole = samples.clip("matroska", frames=40)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        complete = await _extracted(client, await _upload(client, "video", "a.mkv", whole))
        cut = await _extracted(
            client, await _upload(client, "video", "b.mkv", whole[: len(whole) // 2])
        )
    assert complete["truncated"] is False
    assert cut["truncated"] is True
    assert (cut["width"], cut["height"]) == (64, 48)
