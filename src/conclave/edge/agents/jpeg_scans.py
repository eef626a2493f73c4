"""The scans of a JPEG, counted by walking its segments before libjpeg decodes it.

A progressive JPEG keeps every block's coefficients in memory and revisits every block of a
component in each scan that covers it: a file of a few kilobytes declaring a 16000 x 16000 image
and hundreds of scans that are only end-of-band runs kept a worker busy for most of a minute (the
pattern libjpeg-turbo's ``djpeg -maxscans`` and ``TJPARAM_SCANLIMIT`` exist for). The walk reads
the segments' lengths and finds the markers after each scan's entropy-coded data with a regular
expression, so it costs one linear read of the file.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from typing import BinaryIO

from conclave.edge.agents.base import CorruptMedia

MAX_SCANS = 100
"""Scans decoded per JPEG. Encoders write 1 to 4 scans for a baseline image and 6 (grey) or 10
(colour) for libjpeg's standard progression; mozjpeg's searched progressions stay under 20.
libjpeg-turbo suggests 500 for its fuzzers, where the image is small; here the image is not."""

MAX_BLOCK_SCANS = 1 << 26
"""Blocks decoded over all scans (a block visited by three scans counts three times). At libjpeg's
worst-case pace (scans of end-of-band runs alone; docs/benchmarks.md) this bounds a decode to a
few seconds. The standard progression visits each block 5 to 6 times: this
admits a 300 Mpx colour progressive JPEG, or a 100 Mpx one with three times the usual scans;
a baseline JPEG visits each block once."""

MAX_SEGMENTS = 65536
"""Marker segments walked: real files have tens (a few hundred with chunked ICC or XMP)."""

_CHUNK = 1 << 20
# After entropy-coded data the next marker is 0xFF followed by a code other than 0x00 (a stuffed
# 0xFF data byte), a restart marker (0xD0-0xD7) or 0xFF (fill bytes before a marker).
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # SOFn, not DHT, JPG, DAC
_SOS, _EOI = 0xDA, 0xD9


@dataclass
class JpegScans:
    """What the segments up to the first end-of-image marker say about decoding cost."""

    scans: int = 0
    block_scans: int = 0
    blocks: dict[int, int] = field(default_factory=dict)
    """Blocks of each component (by component id) of the frame header."""


def _frame_blocks(payload: bytes) -> dict[int, int]:
    if len(payload) < 6:
        raise CorruptMedia("The JPEG's frame header is cut short.")
    _precision, height, width, count = struct.unpack_from(">BHHB", payload)
    components = [payload[6 + 3 * i : 9 + 3 * i] for i in range(count)]
    if any(len(component) < 3 for component in components) or not components:
        raise CorruptMedia("The JPEG's frame header is cut short.")
    h_max = max(c[1] >> 4 for c in components) or 1
    v_max = max(c[1] & 15 for c in components) or 1
    # A component subsampled by h/h_max covers that share of the columns, in 8 x 8 blocks.
    return {
        c[0]: math.ceil(math.ceil(width * (c[1] >> 4) / h_max) / 8)
        * math.ceil(math.ceil(height * (c[1] & 15) / v_max) / 8)
        for c in components
    }


def _skip_entropy_data(stream: BinaryIO) -> int | None:
    """Read past a scan's entropy-coded data; the code of the marker that ends it (the stream is
    then just past it), or ``None`` at the end of the file."""
    carry = b""
    while chunk := stream.read(_CHUNK):
        data = carry + chunk
        if match := _NEXT_MARKER.search(data):
            stream.seek(match.end() - len(data), 1)
            return data[match.end() - 1]
        carry = b"\xff" if data.endswith(b"\xff") else b""
    return None


def _next_marker(stream: BinaryIO) -> int | None:
    byte = stream.read(1)
    if byte != b"\xff":
        # Bytes between segments: libjpeg skips them with a warning, and so does this walk.
        return _skip_entropy_data(stream) if byte else None
    while (code := stream.read(1)) == b"\xff":
        pass  # fill bytes
    return code[0] if code else None


def count_scans(stream: BinaryIO) -> JpegScans:
    """The scans and block visits of the first image in a JPEG stream (positioned at SOI);
    ``CorruptMedia`` when they exceed :data:`MAX_SCANS` or :data:`MAX_BLOCK_SCANS`."""
    found = JpegScans()
    if stream.read(2) != b"\xff\xd8":
        raise CorruptMedia("The JPEG does not start with a start-of-image marker.")
    marker = _next_marker(stream)
    for _ in range(MAX_SEGMENTS):
        if marker is None or marker == _EOI:
            return found
        if marker in _STANDALONE:
            marker = _next_marker(stream)
            continue
        header = stream.read(2)
        if len(header) < 2:
            return found  # cut short: libjpeg says so when it decodes
        payload = stream.read(max(0, struct.unpack(">H", header)[0] - 2))
        if marker in _FRAMES and not found.blocks:
            found.blocks = _frame_blocks(payload)
        if marker != _SOS:
            marker = _next_marker(stream)
            continue
        found.scans += 1
        if found.scans > MAX_SCANS:
            raise CorruptMedia(f"The JPEG has more than {MAX_SCANS} scans.")
        ids = payload[1 : 1 + 2 * payload[0] : 2] if payload else b""
        found.block_scans += sum(found.blocks.get(component, 0) for component in ids)
        if found.block_scans > MAX_BLOCK_SCANS:
            raise CorruptMedia(
                f"The JPEG's {found.scans} scans decode more than {MAX_BLOCK_SCANS} blocks."
            )
        marker = _skip_entropy_data(stream)
    raise CorruptMedia(f"The JPEG has more than {MAX_SEGMENTS} marker segments.")
