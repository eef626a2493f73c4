"""Crafted audio and video files: headers that lie about sizes, streams or tags get a 4xx or an
honest description, never a crash or a worker that reads what the header promises.

Real files (cut-off recordings, camera movies, audio in MP4 and Ogg) are in the corpus
(``tests/edge/corpus/audio.toml`` and ``video.toml``).
"""

from __future__ import annotations

import io
import struct
import time
from typing import Any

import av
import numpy
import pytest

from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import corpus_file, edge_app, edge_settings, form

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


def _declaring_four_billion(movie: bytes, table: bytes) -> bytes:
    """``movie`` with the entry count of its first ``table`` box set to 2^32 - 1."""
    data = bytearray(movie)
    at = data.index(table) + 8  # type, then version and flags
    data[at : at + 4] = b"\xff\xff\xff\xff"
    return bytes(data)


@pytest.mark.parametrize("table", [b"stts", b"elst"])
async def test_a_movie_table_declaring_more_entries_than_it_holds_is_refused_at_once(
    sqlite_engine, memory_bus, tmp_path, table: bytes
) -> None:
    """MediaInfo loops over a table's declared count: a real M4A whose ``stts`` or ``elst`` claims
    4 billion entries held a parser worker until its time-out (a 1.5 kB file, two of them in
    flight, kept every other upload waiting)."""
    real = corpus_file(  # the attacker's 1.5 kB file was this one, changed
        "pypi:pymediainfo==7.0.1",
        "pymediainfo-7.0.1/tests/data/mp4-with-audio.mp4",
        "60ddc774c7b5fd0c01d169321a444da403d60c0042f6bee01b0c96f6e1535fda",
    ).read_bytes()
    crafted = _declaring_four_billion(real, table)
    backend = Backend("embedded", sqlite_engine, memory_bus)
    settings = edge_settings(tmp_path, parse_timeout_seconds=10)
    async with edge_app(backend, settings) as (client, _app):
        for route in ("audio", "video"):
            started = time.monotonic()
            response = await _upload(client, route, "a.m4a", crafted)
            assert (response.status_code, response.json()["code"]) == (422, "CORRUPT_MEDIA")
            assert "declares more entries than it holds" in response.json()["detail"]
            assert time.monotonic() - started < 5
        # The same file, untouched, is the audio it is.
        assert (await _upload(client, "audio", "a.m4a", real)).status_code == 200


def _encoded(container: str, *, video: bool) -> bytes:
    """A one-second file PyAV's FFmpeg writes: Opus audio, and VP8 video when asked."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container) as output:
        audio = output.add_stream("libopus", rate=48_000, layout="mono")
        picture = output.add_stream("libvpx", rate=10) if video else None
        if picture is not None:
            picture.width, picture.height = 64, 48
            for index in range(10):
                frame = av.VideoFrame.from_ndarray(numpy.zeros((48, 64, 3), numpy.uint8), "rgb24")
                frame.pts = index
                output.mux(picture.encode(frame))
            output.mux(picture.encode())
        for index in range(50):
            samples_ = numpy.zeros((1, 960), numpy.int16)
            frame = av.AudioFrame.from_ndarray(samples_, format="s16", layout="mono")
            frame.sample_rate, frame.pts = 48_000, index * 960
            output.mux(audio.encode(frame))
        output.mux(audio.encode())
    return buffer.getvalue()


async def test_audio_only_webm_is_audio_and_a_movie_is_never_audio(
    sqlite_engine, memory_bus, tmp_path
) -> None:
    """A browser's MediaRecorder writes audio/webm: it had no route (415 on both). A movie with an
    ID3 tag in front sniffs as MP3: it was accepted on /audio, its video track ignored."""
    voice = _encoded("webm", video=False)
    movie = _encoded("matroska", video=True)
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        facts = await _extracted(client, await _upload(client, "audio", "voice.webm", voice))
        assert (facts["container"], facts["codec"], facts["channels"]) == ("Matroska", "opus", 1)
        assert facts["duration_s"] == pytest.approx(1.0, abs=0.1)
        refused = await _upload(client, "video", "voice.webm", voice)
        assert (refused.status_code, refused.json()["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")
        for name, content in (("movie.mkv", movie), ("movie.mp3", b"ID3\x04" + bytes(6) + movie)):
            refused = await _upload(client, "audio", name, content)
            assert (refused.status_code, refused.json()["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")
            assert "video" in refused.json()["detail"]


async def test_a_wav_written_to_a_pipe_is_whole(sqlite_engine, memory_bus, tmp_path) -> None:
    """ffmpeg writing to a pipe leaves the sizes at 0xFFFFFFFF: the data runs to the end of the
    file, which is not a cut-off recording."""
    streamed = _wav(bytes(4 * 44_100), 0xFFFFFFFF)
    backend = Backend("embedded", sqlite_engine, memory_bus)
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        facts = await _extracted(client, await _upload(client, "audio", "pipe.wav", streamed))
    assert facts["truncated"] is False
    assert facts["duration_s"] == pytest.approx(1.0)
