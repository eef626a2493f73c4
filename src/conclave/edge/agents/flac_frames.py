"""How much of a FLAC stream a file really holds: the STREAMINFO block states the total number of
samples, and a cut-off file (an interrupted recording or copy) still states all of them, so
mutagen and ffprobe report the full duration. The frames at the end of the file say where it
stops: the last intact frame header gives its first sample (RFC 9639 §9.1).

Only the file's tail is read (at most :data:`_MAX_TAIL` bytes), whatever the file's size.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

_MIN_TAIL = 64 * 1024
_MAX_TAIL = 1024 * 1024
_MAX_BLOCKS = 1024  # metadata blocks before the audio; a real file has a handful
_MAX_CANDIDATES = 65_536  # sync codes tried in the tail (a crafted tail can be all sync codes)
# Block sizes of the 4-bit code in a frame header (6 and 7: stored after the coded number).
_BLOCK_SIZES = {1: 192, 2: 576, 3: 1152, 4: 2304, 5: 4608} | {
    code: 256 << (code - 8) for code in range(8, 16)
}


def _crc_table(poly: int, width: int) -> list[int]:
    top, mask = 1 << (width - 1), (1 << width) - 1
    table = []
    for byte in range(256):
        crc = byte << (width - 8)
        for _ in range(8):
            crc = ((crc << 1) ^ poly) & mask if crc & top else (crc << 1) & mask
        table.append(crc)
    return table


_CRC8 = _crc_table(0x07, 8)
_CRC16 = _crc_table(0x8005, 16)


def _crc8(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = _CRC8[crc ^ byte]
    return crc


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[(crc >> 8) ^ byte]
    return crc


@dataclass(frozen=True)
class Played:
    """Samples (per channel) the file holds, and whether that is fewer than STREAMINFO states."""

    samples: int
    truncated: bool


@dataclass(frozen=True)
class _StreamInfo:
    max_block: int
    max_frame: int
    total: int
    audio_offset: int


def _stream_info(stream: BinaryIO, size: int) -> _StreamInfo | None:
    if stream.read(4) != b"fLaC":
        return None
    offset, info = 4, None
    for _ in range(_MAX_BLOCKS):
        stream.seek(offset)
        header = stream.read(4)
        if len(header) < 4:
            break
        last, kind, length = header[0] & 0x80, header[0] & 0x7F, int.from_bytes(header[1:4])
        if kind == 0 and length >= 34 and info is None:
            body = stream.read(34)
            if len(body) < 34:
                return None
            max_block = struct.unpack_from(">H", body, 2)[0]
            max_frame = int.from_bytes(body[7:10])
            total = int.from_bytes(body[13:18]) & 0xFFFFFFFFF
            info = (max_block, max_frame, total)
        offset += 4 + length
        if last:
            break
    if info is None:
        return None
    return _StreamInfo(*info, audio_offset=min(offset, size))


def _coded_number(data: bytes, at: int) -> tuple[int, int] | None:
    """The UTF-8-style coded frame or sample number at ``at`` and the offset after it."""
    first = data[at]
    if first < 0x80:
        return first, at + 1
    length = 0  # leading one bits: the number of bytes, as in UTF-8
    while length < 8 and first & (0x80 >> length):
        length += 1
    if not 2 <= length <= 7 or at + length > len(data):
        return None
    value = first & (0x7F >> length)
    for byte in data[at + 1 : at + length]:
        if byte & 0xC0 != 0x80:
            return None
        value = (value << 6) | (byte & 0x3F)
    return value, at + length


def _frame_at(data: bytes, at: int, info: _StreamInfo) -> tuple[int, int] | None:
    """First sample and block size of a frame whose header starts at ``at`` (CRC-8 checked)."""
    if at + 6 > len(data) or data[at + 3] & 0x01 or data[at + 3] >> 4 >= 11:
        return None
    block_code, rate_code = data[at + 2] >> 4, data[at + 2] & 0x0F
    if block_code == 0 or rate_code == 15:
        return None
    coded = _coded_number(data, at + 4)
    if coded is None:
        return None
    number, end = coded
    extra_block = {6: 1, 7: 2}.get(block_code, 0)
    extra_rate = {12: 1, 13: 2, 14: 2}.get(rate_code, 0)
    if end + extra_block + extra_rate + 1 > len(data):
        return None
    block = _BLOCK_SIZES.get(block_code)
    if block is None:
        block = int.from_bytes(data[end : end + extra_block]) + 1
    end += extra_block + extra_rate
    if _crc8(data[at:end]) != data[end]:
        return None
    variable = data[at + 1] & 0x01
    first = number if variable else number * info.max_block
    return first, block


def samples_present(path: str) -> Played | None:
    """What the file's last frames say, or ``None`` when it does not tell (no total stated, or no
    frame header found in the tail)."""
    size = os.path.getsize(path)
    with open(path, "rb") as stream:
        info = _stream_info(stream, size)
        if info is None or info.total == 0:
            return None
        if info.audio_offset >= size:
            return Played(0, True)
        window = min(max(2 * info.max_frame + 64, _MIN_TAIL), _MAX_TAIL)
        start = max(info.audio_offset, size - window)
        stream.seek(start)
        tail = stream.read(size - start)
    at, tried = len(tail) - 2, 0
    while (at := tail.rfind(b"\xff", 0, at + 1)) >= 0 and tried < _MAX_CANDIDATES:
        if tail[at + 1 : at + 2] in (b"\xf8", b"\xf9"):
            tried += 1
            frame = _frame_at(tail, at, info)
            if frame is not None and frame[0] < info.total:
                first, block = frame
                if first + block >= info.total:
                    return Played(info.total, False)  # the final frame is there
                # The file ends in or right after this frame: whole only if its CRC-16 holds.
                whole = len(tail) - at >= 2 and _crc16(tail[at:-2]) == int.from_bytes(tail[-2:])
                return Played(first + block if whole else first, True)
        at -= 1
    return None
