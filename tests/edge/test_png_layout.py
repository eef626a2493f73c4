"""The PNG shortcut: a PNG's chunk headers decide what the image agent skips (no decode to look
for EXIF that is not there, no c2pa read of a file that cannot carry a manifest), and skipping
changes nothing the agent reports. Checked on every real PNG of the corpus and on layouts made to
sit on each side of each rule."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, PngImagePlugin

from conclave.edge.agents import image
from conclave.edge.agents.credentials import content_credentials
from conclave.edge.agents.png_chunks import png_layout
from tests.edge.conftest import corpus_file
from tests.edge.corpus.manifest import load

REAL_PNGS = [entry for entry in load() if "png" in entry.classes and entry.expect == "accepted"]


def _full_path(path: Path) -> dict[str, Any]:
    """What the agent reported before the shortcut: every check made."""
    facts = image.describe_image(str(path), "png")
    credentials = content_credentials(str(path))
    if credentials is not None:
        facts["content_credentials"] = credentials
    return image.clean(facts)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(**save: Any) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (10, 120, 200)).save(buffer, "PNG", **save)
    return buffer.getvalue()


def _before_iend(png: bytes, chunk: bytes) -> bytes:
    return png[:-12] + chunk + png[-12:]


def _exif_block() -> bytes:
    exif = Image.Exif()
    exif[0x010F] = "Conclave test camera"  # Make
    return exif.tobytes()


@pytest.mark.parametrize("entry", REAL_PNGS, ids=lambda entry: entry.name)
def test_every_real_png_reads_the_same_with_the_shortcut(entry: Any) -> None:
    path = corpus_file(entry.source, entry.path, entry.sha256, entry.artifact)
    assert png_layout(str(path)) is not None, "a real PNG's chunks read cleanly"
    assert image.extract(str(path), "png", {}) == _full_path(path)


def test_each_rule_of_the_layout(tmp_path: Path) -> None:
    plain = tmp_path / "plain.png"
    plain.write_bytes(_png())
    layout = png_layout(str(plain))
    assert layout is not None
    assert not layout.exif_needs_decoding and not layout.may_carry_credentials

    cases = {
        # EXIF in an eXIf chunk (Pillow writes it before the data): decoded as before.
        "exif.png": (_png(exif=_exif_block()), True, False),
        # A text chunk after the image data may hold a raw EXIF profile: decoded as before.
        "late-text.png": (_before_iend(_png(), _chunk(b"tEXt", b"Comment\x00late")), True, False),
        # XMP may point at a remote manifest: c2pa reads the file.
        "xmp.png": (
            _before_iend(_png(), _chunk(b"iTXt", b"XML:com.adobe.xmp\x00\x00\x00\x00\x00<x/>")),
            True,  # also a text chunk after the data
            True,
        ),
        # An embedded manifest store: c2pa reads the file.
        "manifest.png": (_before_iend(_png(), _chunk(b"caBX", b"\x00" * 16)), False, True),
    }
    for name, (data, decodes, credentials) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        found = png_layout(str(path))
        assert found is not None, name
        assert (found.exif_needs_decoding, found.may_carry_credentials) == (decodes, credentials)
        assert image.extract(str(path), "png", {}) == _full_path(path), name

    exif = image.extract(str(tmp_path / "exif.png"), "png", {})
    assert exif["exif"]["camera_make"] == "Conclave test camera"


def test_a_raw_exif_profile_before_the_data_is_read_without_decoding(tmp_path: Path) -> None:
    info = PngImagePlugin.PngInfo()
    profile = _exif_block().hex()
    info.add_text("Raw profile type exif", f"\nexif\n{len(profile) // 2}\n{profile}")
    path = tmp_path / "raw-profile.png"
    path.write_bytes(_png(pnginfo=info))
    layout = png_layout(str(path))
    assert layout is not None and not layout.exif_needs_decoding
    shortcut = image.extract(str(path), "png", {})
    assert shortcut == _full_path(path)
    assert shortcut["exif"]["camera_make"] == "Conclave test camera"


def test_chunks_that_do_not_read_cleanly_give_no_layout(tmp_path: Path) -> None:
    png = _png()
    broken = {
        "no-iend.png": png[:-12],
        "past-the-end.png": png[:8] + struct.pack(">I", 10**9) + b"IDAT" + png[16:],
        "not-png.png": b"GIF89a" + png[6:],
        "cut-header.png": png[:8] + b"\x00\x00",
    }
    for name, data in broken.items():
        path = tmp_path / name
        path.write_bytes(data)
        assert png_layout(str(path)) is None, name
    many = tmp_path / "many.png"
    many.write_bytes(_before_iend(png, _chunk(b"teXt", b"") * 5000))  # ancillary, ignored
    assert png_layout(str(many)) is None  # past MAX_CHUNKS: the full checks run


def test_a_png_read_from_one_opening_is_still_proven_chunk_by_chunk(tmp_path: Path) -> None:
    """A PNG that needs no decoding is described and verified from one opening: a damaged
    chunk after the header Pillow opens with is still found (every chunk's CRC), and an
    animated PNG's frames are still counted."""
    png = _png()
    data_at = png.index(b"IDAT")
    damaged = bytearray(png)
    damaged[data_at + 6] ^= 0xFF  # a byte of the compressed image data: its CRC no longer holds
    bad_crc = _chunk(b"tEXt", b"Comment\x00x")[:-4] + b"\x00\x00\x00\x00"
    cases = {
        "damaged-data.png": bytes(damaged),
        "bad-crc-text.png": png[: data_at - 4] + bad_crc + png[data_at - 4 :],  # before the data
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        assert png_layout(str(path)) is not None, name
        # Pillow opens the first; the second it cannot open at all.
        with pytest.raises(image.CorruptMedia, match="damaged"):
            image.extract(str(path), "png", {})
    frames = [Image.new("RGB", (16, 16), (n * 60, 0, 0)) for n in range(3)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "PNG", save_all=True, append_images=frames[1:])
    animated = tmp_path / "animated.png"
    animated.write_bytes(buffer.getvalue())
    layout = png_layout(str(animated))
    assert layout is not None and not layout.exif_needs_decoding
    facts = image.extract(str(animated), "png", {})
    assert facts["frames"] == 3
    assert facts == _full_path(animated)


def _claiming_frames(png: bytes, claimed: int) -> bytes:
    """``png`` (an APNG) with its acTL chunk claiming ``claimed`` frames, its CRC made good."""
    at = png.index(b"acTL") - 4
    (length,) = struct.unpack(">I", png[at : at + 4])
    plays = png[at + 12 : at + 16]
    chunk = _chunk(b"acTL", struct.pack(">I", claimed) + plays)
    return png[:at] + chunk + png[at + 12 + length :]


def test_an_animated_png_is_described_with_the_frames_it_holds_not_those_it_claims(
    tmp_path: Path,
) -> None:
    frames = [Image.new("RGB", (16, 16), (n * 90, 0, 0)) for n in range(2)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "PNG", save_all=True, append_images=frames[1:])
    honest = buffer.getvalue()
    lying = _claiming_frames(honest, 2**31)
    late_text = _before_iend(lying, _chunk(b"tEXt", b"Comment\x00late"))  # the general path
    for name, data in {"lying.png": lying, "lying-late-text.png": late_text}.items():
        path = tmp_path / name
        path.write_bytes(data)
        layout = png_layout(str(path))
        assert layout is not None and layout.frame_controls == 2, name
        assert image.extract(str(path), "png", {})["frames"] == 2, name
    fewer = tmp_path / "claims-one.png"  # a claim under the fcTL count is what a player shows
    fewer.write_bytes(_claiming_frames(honest, 1))
    assert image.extract(str(fewer), "png", {})["frames"] == 1
