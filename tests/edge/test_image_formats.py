"""Image and landscape files beyond the real-file corpus: crafted TIFFs that must be refused
without hanging a worker, a layout no corpus file has, and the HEIF brands phones write."""

from __future__ import annotations

import io
import struct
import zlib

import numpy
import pillow_heif
import pytest
import tifffile
from PIL import Image

from conclave.edge.sniff import sniff
from conclave.platform.errors import UnsupportedMediaType
from tests.conftest import Backend
from tests.edge.conftest import upload_facts

# GeoKeyDirectory: version 1.1.0, 3 keys: projected model, pixel-is-area, user-defined projection.
_GEOKEYS = (1, 1, 0, 3, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 32767)


def _pages(count: int) -> bytes:
    buffer = io.BytesIO()
    with tifffile.TiffWriter(buffer) as writer:
        for _ in range(count):
            writer.write(numpy.zeros((1, 1), numpy.uint8), contiguous=False)
    return buffer.getvalue()


async def test_a_tiff_with_more_directories_than_the_edge_reads_is_refused(
    backend: Backend, tmp_path
):
    status, body = await upload_facts(backend, tmp_path, "image", "stack.tif", _pages(4097))
    assert status == 422 and body["code"] == "CORRUPT_MEDIA"
    assert "4096" in body["detail"]


async def test_a_tiled_tiff_cut_short_is_refused(backend: Backend, tmp_path):
    # Tiles that start past the end: an upload cut short. (Byte counts are not trusted: writers
    # get them wrong often enough that libtiff recomputes them.)
    image = numpy.arange(64 * 64, dtype=numpy.uint16).reshape(64, 64)
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, image, tile=(16, 16))
    whole = buffer.getvalue()
    status, body = await upload_facts(
        backend, tmp_path, "image", "cut.tif", whole[: len(whole) // 2]
    )
    assert status == 422 and body["code"] == "CORRUPT_MEDIA"


async def test_a_four_band_16_bit_geotiff_with_a_transformation_matrix_is_described(
    backend: Backend, tmp_path
):
    # The usual satellite layout (Pillow has no mode for it), placed by a rotated affine matrix
    # only (no tie point) in a user-defined projection.
    matrix = (0.0, 10.0, 0.0, 500000.0, -10.0, 0.0, 0.0, 4000000.0) + (0.0,) * 7 + (1.0,)
    buffer = io.BytesIO()
    tifffile.imwrite(
        buffer,
        numpy.zeros((4, 30, 20), numpy.uint16),
        photometric="minisblack",
        planarconfig="separate",
        extratags=[(34264, 12, 16, matrix, True), (34735, 3, len(_GEOKEYS), _GEOKEYS, True)],
    )
    status, facts = await upload_facts(
        backend, tmp_path, "landscape", "scene.tif", buffer.getvalue()
    )
    assert status == 200, facts
    assert (facts["width"], facts["height"], facts["bands"]) == (20, 30, 4)
    assert facts["sample_type"] == "uint16"
    [geotiff] = facts["geo_reference"]
    assert geotiff["epsg"] is None and geotiff["user_defined"] is True
    # x = 10·row + 500000, y = -10·column + 4000000 over 20 columns and 30 rows.
    assert geotiff["bounds"] == [500000.0, 3999800.0, 500300.0, 4000000.0]


def _ftyp(major: bytes, *compatible: bytes) -> bytes:
    size = 16 + 4 * len(compatible)
    return size.to_bytes(4, "big") + b"ftyp" + major + b"\x00\x00\x00\x00" + b"".join(compatible)


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (_ftyp(b"heic", b"mif1", b"heic"), "heif"),
        (_ftyp(b"mif1", b"MiHE", b"miaf", b"MiHB", b"heic"), "heif"),  # Apple
        (_ftyp(b"heix", b"mif1", b"heix", b"miaf", b"MiHA"), "heif"),  # Sony, Canon
        (_ftyp(b"msf1", b"msf1", b"hevc", b"heic", b"mif1"), "heif"),  # burst sequence
        (_ftyp(b"MiHE", b"mif1", b"heic"), "heif"),  # a phone brand first, HEIF compatible
        (_ftyp(b"avif", b"avif", b"mif1", b"miaf"), "avif"),
        (_ftyp(b"mif1", b"avif", b"miaf"), "avif"),
    ],
)
def test_the_image_route_takes_the_heif_brands_phones_write(head: bytes, expected: str) -> None:
    assert sniff("image", head + b"\x00" * 64, len(head) + 64).format == expected


@pytest.mark.parametrize(
    "head",
    [_ftyp(b"isom", b"isom", b"avc1", b"mp41"), _ftyp(b"qt  ", b"qt  "), _ftyp(b"M4A ", b"mp42")],
    ids=["mp4", "quicktime", "m4a"],
)
def test_the_image_route_refuses_other_iso_media(head: bytes) -> None:
    with pytest.raises(UnsupportedMediaType):
        sniff("image", head + b"\x00" * 64, len(head) + 64)


async def test_a_cloud_optimized_geotiff_with_an_internal_mask_counts_one_frame(
    backend: Backend, tmp_path
):
    # GDAL's layout: the image, its overview, then 1-bit masks (NewSubfileType 4, and 5 for the
    # overview's). Counting frames used to walk into the masks and refuse the file as corrupt.
    buffer = io.BytesIO()
    scale_and_tie = [
        (33550, 12, 3, (10.0, 10.0, 0.0), True),
        (33922, 12, 6, (0.0, 0.0, 0.0, 500000.0, 4000000.0, 0.0), True),
        (34735, 3, len(_GEOKEYS), _GEOKEYS, True),
    ]
    with tifffile.TiffWriter(buffer) as writer:
        writer.write(numpy.zeros((64, 64), numpy.uint16), tile=(16, 16), extratags=scale_and_tie)
        writer.write(numpy.zeros((32, 32), numpy.uint16), tile=(16, 16), subfiletype=1)
        writer.write(numpy.ones((64, 64), bool), tile=(16, 16), subfiletype=4)
        writer.write(numpy.ones((32, 32), bool), tile=(16, 16), subfiletype=5)
    status, facts = await upload_facts(backend, tmp_path, "landscape", "cog.tif", buffer.getvalue())
    assert status == 200, facts
    assert (facts["frames"], facts["overviews"], facts["masks"]) == (1, 1, 2)
    assert facts["geo_reference"][0]["bounds"] == [500000.0, 3999360.0, 500640.0, 4000000.0]


@pytest.mark.parametrize(
    ("route", "content"),
    [
        ("image", _ftyp(b"heic", b"mif1", b"heic") + b"\x00\x00\x00\x08meta" + b"\xff" * 64),
        ("image", _ftyp(b"avif", b"avif", b"mif1") + b"\x7f\xff\xff\xffmdat" + b"\x00" * 64),
        ("landscape", b"II*\x00\xff\xff\xff\x7f" + b"\x00" * 64),  # first directory past the end
        ("landscape", b"MM\x00*\x00\x00\x00\x08\xff\xff" + b"\x00" * 64),  # 65535 tags declared
    ],
    ids=["heif-garbage", "avif-huge-box", "tiff-offset", "tiff-tag-count"],
)
async def test_crafted_headers_of_accepted_formats_are_refused_as_corrupt(
    backend: Backend, tmp_path, route: str, content: bytes
):
    status, body = await upload_facts(backend, tmp_path, route, "crafted.bin", content)
    assert status == 422 and body["code"] == "CORRUPT_MEDIA", body


def _progressive_jpeg(side: int, scans: int) -> bytes:
    """A grey progressive JPEG whose scans are end-of-band runs only: a few bytes per scan, and
    every scan makes libjpeg visit every block."""

    def segment(marker: int, data: bytes) -> bytes:
        return bytes((0xFF, marker)) + (len(data) + 2).to_bytes(2, "big") + data

    bits = ""
    left = (side // 8) ** 2
    while left > 0:  # symbol 0xE0 (code "0"): a run of 16384 + 14 bits more blocks
        run = max(min(left, 32767), 16384)
        bits += "0" + format(run - 16384, "014b")
        left -= run
    bits += "1" * (-len(bits) % 8)
    data = bytes(int(bits[i : i + 8], 2) for i in range(0, len(bits), 8)).replace(
        b"\xff", b"\xff\x00"
    )
    header = (
        segment(0xDB, bytes(1) + bytes([1] * 64))
        + segment(0xC2, bytes([8]) + side.to_bytes(2, "big") * 2 + bytes([1, 1, 0x11, 0]))
        + segment(0xC4, bytes([0x10, 1]) + bytes(15) + bytes([0xE0]))
    )
    first = segment(0xDA, bytes([1, 1, 0, 1, 63, 0x00])) + data
    refinement = segment(0xDA, bytes([1, 1, 0, 1, 63, 0x10])) + data
    return b"\xff\xd8" + header + first + refinement * (scans - 1) + b"\xff\xd9"


@pytest.mark.parametrize(
    ("side", "scans", "detail"),
    [(8, 101, "more than 100 scans"), (16000, 20, "scans decode more than")],
    ids=["scan-count", "blocks-times-scans"],
)
async def test_a_progressive_jpeg_costing_more_decoding_than_the_edge_allows_is_refused(
    backend: Backend, tmp_path, side: int, scans: int, detail: str
):
    # 16000 x 16000 grey is 4 M blocks: twenty scans walk 80 M of them, 3 s of libjpeg's time
    # (300 scans were 40 s), from a file of 10 kB.
    content = _progressive_jpeg(side, scans)
    status, body = await upload_facts(backend, tmp_path, "image", "scans.jpg", content)
    assert status == 422 and body["code"] == "CORRUPT_MEDIA", body
    assert detail in body["detail"]


async def test_a_progressive_jpeg_as_encoders_write_it_is_read(backend: Backend, tmp_path):
    buffer = io.BytesIO()
    pixels = numpy.random.default_rng(17).integers(0, 255, (900, 1200, 3), numpy.uint8)
    Image.fromarray(pixels).save(buffer, "JPEG", progressive=True, quality=90)
    status, facts = await upload_facts(backend, tmp_path, "image", "photo.jpg", buffer.getvalue())
    assert status == 200, facts
    assert (facts["format"], facts["width"], facts["height"]) == ("JPEG", 1200, 900)


@pytest.mark.parametrize("route", ["image", "landscape"])
async def test_a_geotiff_with_hundreds_of_ground_control_points_is_described(
    backend: Backend, tmp_path, route: str
):
    # tifffile hands a tag of more than 1024 values over as an array, not a tuple.
    points = tuple(float(v) for i in range(200) for v in (i, i, 0, 7 + i / 100, 45 + i / 100, 0))
    buffer = io.BytesIO()
    tifffile.imwrite(
        buffer, numpy.zeros((100, 100), numpy.uint8), extratags=[(33922, 12, 1200, points, True)]
    )
    status, facts = await upload_facts(backend, tmp_path, route, "gcps.tif", buffer.getvalue())
    assert status == 200, facts
    if route == "landscape":
        [geotiff] = facts["geo_reference"]
        assert geotiff["tiepoints"] == 200
        assert geotiff["tiepoint"] == [0.0, 0.0, 0.0, 7.0, 45.0, 0.0]


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("map_url", "expected"),
    [
        ("https://maps.example/#map=5/999/-999", []),
        ("https://maps.example/?bbox=7,46,8,45&zoom=31", []),
        (
            "https://maps.example/?zoom=\N{SUPERSCRIPT TWO}&lat=45.5&lon=7.25",
            [
                {
                    "kind": "map_url",
                    "host": "maps.example",
                    "center": {"latitude": 45.5, "longitude": 7.25},
                }
            ],
        ),
    ],
    ids=["centre-out-of-range", "bbox-upside-down", "zoom-not-ascii"],
)
async def test_a_map_url_part_out_of_range_or_unreadable_is_left_out_never_refusing_the_file(
    backend: Backend, tmp_path, map_url: str, expected: list[dict[str, object]]
):
    status, facts = await upload_facts(
        backend, tmp_path, "landscape", "map.png", _png(), {"map_url": map_url}
    )
    assert status == 200, facts
    assert facts["geo_reference"] == expected
    assert facts["georeferenced"] is bool(expected)


def _gif(frames: bytes, count: int) -> bytes:
    screen = b"GIF89a" + (1).to_bytes(2, "little") * 2 + bytes([0x80, 0, 0]) + bytes(6)
    return screen + frames * count + b";"


async def test_gif_frames_are_counted_within_a_budget(backend: Backend, tmp_path):
    # One-pixel frames: an image descriptor, LZW code size 2, data sub-blocks, terminator.
    frame = b",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02\x44\x01\x00"
    status, facts = await upload_facts(backend, tmp_path, "image", "a.gif", _gif(frame, 300))
    assert status == 200, facts
    assert facts["frames"] == 300 and "frames_at_least" not in facts
    # A frame split into 2^18 one-byte sub-blocks: the count stops, and says so.
    split = b",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02" + b"\x01\x44" * (1 << 18) + b"\x00"
    status, facts = await upload_facts(backend, tmp_path, "image", "b.gif", _gif(split, 2))
    assert status == 200, facts
    assert facts["frames"] == 1 and facts["frames_at_least"] is True
    # c2pa would read those blocks one Python call each: not asked.
    assert facts["content_credentials"]["checked"] is False


@pytest.mark.parametrize(
    ("fmt", "brand"),
    [("HEIF", b"MiHE"), ("HEIF", b"miaf"), ("AVIF", b"mif1"), ("AVIF", b"miaf")],
)
async def test_heif_and_avif_are_decoded_whatever_their_major_brand(
    backend: Backend, tmp_path, fmt: str, brand: bytes
):
    # The sniffer takes a file by its compatible brands; the decoder must follow it.
    buffer = io.BytesIO()
    image = Image.new("RGB", (64, 48), (9, 99, 200))
    if fmt == "HEIF":
        pillow_heif.from_pillow(image).save(buffer, format="HEIF")
    else:
        image.save(buffer, "AVIF")
    written = buffer.getvalue()
    content = written[:8] + brand + written[12:]
    status, facts = await upload_facts(backend, tmp_path, "image", "photo.heic", content)
    assert status == 200, facts
    assert (facts["format"], facts["width"], facts["height"]) == (fmt, 64, 48)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data).to_bytes(4, "big")
    return len(data).to_bytes(4, "big") + kind + data + crc


_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_HEADER = _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 10, 10, 8, 2, 0, 0, 0))
_DATA = _png_chunk(b"IDAT", zlib.compress(b"".join(b"\x00" + b"\x80" * 30 for _ in range(10))))
_END = _png_chunk(b"IEND", b"")


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        (_SIGNATURE + _HEADER + _END, "The PNG holds no image data (no IDAT chunk)."),
        (
            (_SIGNATURE + _HEADER + _DATA)[:-10],
            "The image file is truncated: it ends before its format says it does.",
        ),
        (
            _SIGNATURE + _HEADER + _DATA[:-4] + b"\x00\x00\x00\x01" + _END,
            "A chunk of the PNG is damaged: its checksum or its length does not match.",
        ),
        (
            _SIGNATURE + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 0, 10, 8, 2, 0, 0, 0)),
            "The image cannot be opened: its header, or a part before its image data, is "
            "damaged or out of range.",
        ),
    ],
    ids=["no-image-data", "cut-short", "damaged-chunk", "zero-width"],
)
async def test_a_broken_png_is_refused_saying_what_is_wrong(
    backend: Backend, tmp_path, content: bytes, detail: str
):
    # These said "cannot be parsed: IndexError" or "cannot be decoded: OSError/SyntaxError":
    # words for the parser's author, not for whoever sent the file.
    status, body = await upload_facts(backend, tmp_path, "image", "broken.png", content)
    assert status == 422 and body["code"] == "CORRUPT_MEDIA", body
    assert body["detail"] == detail
    assert str(tmp_path) not in body["detail"]
