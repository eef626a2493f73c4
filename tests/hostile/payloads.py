"""Hostile files, generated: zip bombs, decompression bombs, billion laughs, deep JSON.

Each is built in a few megabytes of memory however large it claims or inflates to, so the tests
measure the service, not the generator.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

from PIL import Image

MiB = 1024**2


def zip_bomb(name: str, inflated_bytes: int, extra: dict[str, bytes] | None = None) -> bytes:
    """A ZIP whose entry ``name`` inflates to ``inflated_bytes`` of zeros (about 1000:1)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for other, content in (extra or {}).items():
            archive.writestr(other, content)
        chunk = b"\0" * MiB
        with archive.open(name, "w", force_zip64=True) as entry:
            for _ in range(inflated_bytes // MiB):
                entry.write(chunk)
    return buffer.getvalue()


def zipped(files: dict[str, bytes]) -> bytes:
    """A plain ZIP of ``files``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def lying_zip_bomb(name: str, inflated_bytes: int, declared_bytes: int = 1000) -> bytes:
    """A ZIP bomb whose headers claim the entry is ``declared_bytes`` long: a size check on the
    header passes, so only a reader that stops at the declared size is safe."""
    real = zip_bomb(name, inflated_bytes)
    info = zipfile.ZipFile(io.BytesIO(real)).getinfo(name)
    # Rewrite without the ZIP64 extra field, with the lie in both local and central headers.
    payload = real[info.header_offset :]
    local_name_len, local_extra_len = struct.unpack_from("<HH", payload, 26)
    start = 30 + local_name_len + local_extra_len
    data = payload[start : start + info.compress_size]
    encoded = name.encode()
    local = struct.pack(
        "<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, info.CRC, len(data), declared_bytes,
        len(encoded), 0,
    ) + encoded  # fmt: skip
    central = struct.pack(
        "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, info.CRC, len(data),
        declared_bytes, len(encoded), 0, 0, 0, 0, 0, 0,
    ) + encoded  # fmt: skip
    body = local + data
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(body), 0)
    return body + central + end


def kml_document(body: str = "") -> bytes:
    """A small KML document."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<kml xmlns="http://www.opengis.net/kml/2.2">'
        f"<Document>{body}</Document></kml>"
    ).encode()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bomb(width: int = 20_000, height: int = 20_000) -> bytes:
    """A real 1-bit PNG of ``width`` x ``height`` zero pixels: tens of kilobytes on the wire,
    hundreds of millions of pixels once decoded."""
    row = b"\0" * (1 + (width + 7) // 8)  # filter byte + packed pixels
    compressor = zlib.compressobj(9)
    idat = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", idat)
        + _png_chunk(b"IEND", b"")
    )


def jpeg_pixel_flood(width: int = 65_000, height: int = 65_000) -> bytes:
    """A small valid JPEG whose frame header claims ``width`` x ``height`` pixels."""
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 20, 20)).save(buffer, "JPEG")
    data = bytearray(buffer.getvalue())
    for marker in (b"\xff\xc0", b"\xff\xc2"):  # baseline or progressive frame header
        at = data.find(marker)
        if at != -1:
            struct.pack_into(">HH", data, at + 5, height, width)
            return bytes(data)
    raise AssertionError("Pillow wrote a JPEG without a frame header")


def billion_laughs(root: str, attributes: str = "") -> bytes:
    """The classic entity-expansion bomb: ten levels of ten, a billion ``lol``s."""
    entities = ['<!ENTITY lol0 "lol">'] + [
        f'<!ENTITY lol{level} "{f"&lol{level - 1};" * 10}">' for level in range(1, 10)
    ]
    return (
        f'<?xml version="1.0"?>\n<!DOCTYPE {root} [\n' + "\n".join(entities) + "\n]>\n"
        f"<{root} {attributes}>&lol9;</{root}>"
    ).encode()


def deep_json(depth: int, leaf: str = "1") -> str:
    """``depth`` nested arrays around ``leaf``."""
    return "[" * depth + leaf + "]" * depth


def deep_object(depth: int) -> str:
    """``depth`` nested objects: ``{"a": {"a": ... {}}}``."""
    return '{"a":' * depth + "{}" + "}" * depth
