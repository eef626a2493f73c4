"""How much of a VBR MP3 a file holds. Encoders write a Xing (LAME: ``Info``/``Xing``) or a
Fraunhofer ``VBRI`` header in the first frame with the stream's byte count and a table of
contents (where in the bytes each part of the duration starts); mutagen reports the duration that
header states, which a cut-off file no longer holds. The frames present are counted (at most
:data:`_MAX_FRAMES` headers of 4 bytes read), past that the table says how far the bytes go.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

_XING_OFFSETS = (4 + 32, 4 + 17, 4 + 9)  # after the side information: MPEG-1 stereo, mono / v2
_VBRI_OFFSET = 4 + 32
_MAX_VBRI_ENTRIES = 4096
# A cut-off file's frames are counted one by one up to this many (about 100 s of audio); past
# that the header's table of contents says how far the bytes go.
_MAX_FRAMES = 4096
_BITRATES = {  # kbit/s by (MPEG-1?, layer), index 1 to 14
    (True, 1): (32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_RATES = {3: (44_100, 48_000, 32_000), 2: (22_050, 24_000, 16_000), 0: (11_025, 12_000, 8_000)}


@dataclass(frozen=True)
class Held:
    """What the bytes present hold: counted seconds, or a share (0 to 1) of the stated
    duration."""

    seconds: float | None = None
    share: float | None = None


def _xing(frame: bytes) -> tuple[int, list[int]] | None:
    for offset in _XING_OFFSETS:
        for at in (offset, offset + 2):  # + 2: a frame with a CRC
            if frame[at : at + 4] in (b"Xing", b"Info"):
                flags = struct.unpack_from(">I", frame, at + 4)[0]
                position = at + 8 + (4 if flags & 1 else 0)
                if not flags & 2 or position + 4 > len(frame):
                    return None
                total = struct.unpack_from(">I", frame, position)[0]
                position += 4
                toc = list(frame[position : position + 100]) if flags & 4 else []
                return total, toc if len(toc) == 100 else []
    return None


def _vbri(frame: bytes) -> tuple[int, list[int]] | None:
    at = _VBRI_OFFSET
    if frame[at : at + 4] != b"VBRI" or len(frame) < at + 26:
        return None
    total = struct.unpack_from(">I", frame, at + 10)[0]
    entries, scale, size = struct.unpack_from(">HHH", frame, at + 18)
    entries = min(entries, _MAX_VBRI_ENTRIES)
    table = frame[at + 26 : at + 26 + entries * size]
    if size not in (1, 2, 3, 4) or len(table) < entries * size:
        return total, []
    # Each entry: the byte size of one equal slice of the duration.
    sizes = [int.from_bytes(table[i : i + size]) * scale for i in range(0, len(table), size)]
    return total, sizes


def _share_from_xing(toc: list[int], total: int, present: int) -> float:
    """Xing's table: entry ``i`` is where ``i`` % of the duration starts, in 1/256ths of
    ``total``."""
    reached = present * 256 / total
    for percent in range(99, -1, -1):
        if toc[percent] <= reached:
            low = toc[percent]
            high = toc[percent + 1] if percent < 99 else 256
            step = (reached - low) / (high - low) if high > low else 0.0
            return min(1.0, (percent + min(step, 1.0)) / 100)
    return 0.0


def _share_from_vbri(sizes: list[int], present: int) -> float:
    covered = 0
    for index, size in enumerate(sizes):
        if covered + size > present:
            return (index + (present - covered) / size) / len(sizes)
        covered += size
    return 1.0


def _frame(header: bytes) -> tuple[int, int, int] | None:
    """Length in bytes, samples and sample rate of the MPEG audio frame with this header."""
    if len(header) < 4 or header[0] != 0xFF or header[1] & 0xE0 != 0xE0:
        return None
    version, layer = (header[1] >> 3) & 3, 4 - ((header[1] >> 1) & 3)
    bitrate_index, rate_index = header[2] >> 4, (header[2] >> 2) & 3
    if version == 1 or layer == 4 or not 0 < bitrate_index < 15 or rate_index == 3:
        return None
    mpeg1, padding = version == 3, (header[2] >> 1) & 1
    bitrate = _BITRATES[mpeg1, layer if mpeg1 or layer == 1 else 2][bitrate_index - 1] * 1000
    rate = _RATES[version][rate_index]
    if layer == 1:
        return (12 * bitrate // rate + padding) * 4, 384, rate
    samples = 1152 if mpeg1 or layer == 2 else 576
    return samples // 8 * bitrate // rate + padding, samples, rate


def _seconds_in_frames(stream: BinaryIO, start: int, end: int) -> float | None:
    """Duration of the whole frames between ``start`` and ``end`` (the first, the VBR header's
    own frame, holds no audio), or ``None`` when there are more than :data:`_MAX_FRAMES`."""
    seconds, offset = 0.0, start
    for index in range(_MAX_FRAMES):
        stream.seek(offset)
        frame = _frame(stream.read(4))
        if frame is None or offset + frame[0] > end:
            return seconds
        if index:
            seconds += frame[1] / frame[2]
        offset += frame[0]
    return None


def held(path: str, frame_offset: int) -> Held | None:
    """What the MP3 at ``path`` holds, when its VBR header states a byte count the file lacks;
    ``None`` when it is whole or nothing states a size."""
    size = os.path.getsize(path)
    with open(path, "rb") as stream:
        stream.seek(frame_offset)
        frame = stream.read(4 + 32 + 26 + 2 * _MAX_VBRI_ENTRIES)
        stream.seek(max(0, size - 128))
        has_id3v1 = stream.read(3) == b"TAG"
        present = size - frame_offset - (128 if has_id3v1 else 0)
        xing, vbri = _xing(frame), _vbri(frame)
        header = xing or vbri
        if header is None or not 0 < present < header[0]:
            return None
        counted = _seconds_in_frames(stream, frame_offset, frame_offset + present)
    if counted is not None:
        return Held(seconds=counted)
    total, table = header
    if xing is not None and table:
        return Held(share=_share_from_xing(table, total, present))
    if xing is None and table:
        return Held(share=_share_from_vbri(table, present))
    return Held(share=present / total)
