"""How much of a cut-off MP4/QuickTime/3GPP file can play. Its movie box lists every sample's
place in the file (chunk offsets, samples per chunk, sample sizes) and time (ISO/IEC 14496-12
§8.6-8.7); the movie header still states the whole duration when the media data runs past the
end of the file. The samples that end within the file say how far each track plays.

This is also how a cut-off file is found: MediaInfo flags a media data box that runs past the end
of the file, not a movie whose media data box is missing (a camera's movie box kept alone).
Only the movie box's tables are read, never the media data: each table at most
:data:`_MAX_ENTRIES` entries (4 or 8 bytes each, in an :class:`array.array`), and at most
:data:`_MAX_WALK` samples and chunks placed in all.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from dataclasses import dataclass
from typing import BinaryIO

from conclave.edge.agents.base import CorruptMedia

_CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl"}
_TABLES = {b"mdhd", b"hdlr", b"stts", b"stsc", b"stsz", b"stco", b"co64"}
_MAX_BOXES = 4096  # boxes visited in the movie box: tracks x their tables, with room to spare
_MAX_ENTRIES = 4_000_000  # samples or chunks of one track (a day of 30 fps video is 2.6 M)
_MAX_WALK = 8_000_000  # samples and chunks placed, over all tracks (2 h of 60 fps video: 0.8 M)


@dataclass(frozen=True)
class Playable:
    """How long the file plays from its bytes, and whether some sample lies past its end."""

    seconds: float
    truncated: bool


def _boxes(
    stream: BinaryIO, start: int, end: int, budget: list[int]
) -> list[tuple[bytes, int, int]]:
    """The boxes between ``start`` and ``end``: type, payload offset, payload size."""
    found = []
    offset = start
    while offset + 8 <= end and budget[0] > 0:
        budget[0] -= 1
        stream.seek(offset)
        header = stream.read(16)
        if len(header) < 8:
            break
        size, kind = struct.unpack_from(">I4s", header)
        skip = 8
        if size == 1 and len(header) == 16:
            size, skip = struct.unpack_from(">Q", header, 8)[0], 16
        elif size == 0:
            size = end - offset
        if size < skip:
            break
        found.append((kind, offset + skip, min(size, end - offset) - skip))
        offset += size
    return found


def _leaves(
    stream: BinaryIO, start: int, span: int, parents: set[bytes], budget: list[int]
) -> list[tuple[bytes, int, int]]:
    """The boxes below ``start`` that are not ``parents``, descending into those that are."""
    found = []
    stack = [(start, span)]
    while stack:
        offset, length = stack.pop()
        for kind, child_offset, child_size in _boxes(stream, offset, offset + length, budget):
            if kind in parents:
                stack.append((child_offset, child_size))
            else:
                found.append((kind, child_offset, child_size))
    return found


def _array(stream: BinaryIO, offset: int, count: int, code: str) -> array[int] | None:
    if count > _MAX_ENTRIES:
        return None
    values = array(code)
    stream.seek(offset)
    data = stream.read(count * values.itemsize)
    if len(data) < count * values.itemsize:
        return None
    values.frombytes(data)
    if sys.byteorder == "little":
        values.byteswap()
    return values


def _track(
    stream: BinaryIO, tables: dict[bytes, tuple[int, int]], size: int, budget: list[int]
) -> Playable | None:
    """Seconds of one track whose samples end within the file's ``size`` bytes."""
    stream.seek(tables[b"mdhd"][0])
    head = stream.read(32)
    version = head[0] if head else 0
    timescale = struct.unpack_from(">I", head, 20 if version == 1 else 12)[0] if head else 0
    entries: dict[bytes, bytes] = {}
    for name in (b"stts", b"stsc", b"stsz", b"stco", b"co64"):
        if name in tables:
            stream.seek(tables[name][0])
            entries[name] = stream.read(12)
    offsets_box = b"co64" if b"co64" in entries else b"stco"
    if not timescale or any(k not in entries for k in (b"stts", b"stsc", b"stsz", offsets_box)):
        return None
    chunks = _array(
        stream,
        tables[offsets_box][0] + 8,
        struct.unpack_from(">I", entries[offsets_box], 4)[0],
        "Q" if offsets_box == b"co64" else "I",
    )
    runs = _array(
        stream, tables[b"stsc"][0] + 8, 3 * struct.unpack_from(">I", entries[b"stsc"], 4)[0], "I"
    )
    uniform, count = struct.unpack_from(">II", entries[b"stsz"], 4)
    sizes = None if uniform else _array(stream, tables[b"stsz"][0] + 12, count, "I")
    times = _array(
        stream, tables[b"stts"][0] + 8, 2 * struct.unpack_from(">I", entries[b"stts"], 4)[0], "I"
    )
    if chunks is None or runs is None or times is None or (sizes is None and not uniform):
        return None
    if count == 0:
        return None  # a fragmented movie keeps its samples in movie fragments, not these tables
    if count + len(chunks) > budget[0]:
        return None
    budget[0] -= count + len(chunks)
    # Samples whose bytes lie within the file, chunk by chunk in the order the table gives.
    whole, run = 0, 0
    for chunk, offset in enumerate(chunks, start=1):
        while run + 3 < len(runs) and runs[run + 3] <= chunk:
            run += 3
        for _ in range(runs[run + 1] if runs else 0):
            if whole >= count:
                break
            length = uniform or (sizes[whole] if sizes is not None else 0)
            if offset + length > size:
                return Playable(_seconds(times, whole, timescale), True)
            offset += length
            whole += 1
    return Playable(_seconds(times, whole, timescale), False)


def _seconds(times: array[int], samples: int, timescale: int) -> float:
    """Media time of the first ``samples`` samples (time-to-sample runs: count, delta)."""
    ticks = 0
    for index in range(0, len(times) - 1, 2):
        taken = min(times[index], samples)
        ticks += taken * times[index + 1]
        samples -= taken
        if samples <= 0:
            break
    return ticks / timescale


# Tables whose entry count a reader loops over: where the count is in the payload (after version
# and flags), and how many bytes an entry takes (``None``: by the version, as for ``elst``).
_COUNTED: dict[bytes, tuple[int, int | None]] = {
    b"stts": (4, 8),
    b"ctts": (4, 8),
    b"stsc": (4, 12),
    b"stco": (4, 4),
    b"co64": (4, 8),
    b"stss": (4, 4),
    b"stps": (4, 4),
    b"stsz": (8, 4),
    b"elst": (4, None),
}
_TABLE_PARENTS = _CONTAINERS | {b"edts"}


def check_tables(path: str) -> None:
    """Refuse (422) a movie whose sample or edit tables declare more entries than their boxes
    hold. MediaInfo loops over a declared count without that check: a 1.5 kB MP4 whose ``stts``
    or ``elst`` claims 4 billion entries held a parser worker until its time-out."""
    size = os.path.getsize(path)
    budget = [_MAX_BOXES]
    with open(path, "rb") as stream:
        for movie in _boxes(stream, 0, size, budget):
            if movie[0] != b"moov":
                continue
            for kind, offset, length in _leaves(stream, movie[1], movie[2], _TABLE_PARENTS, budget):
                if kind in _COUNTED:
                    _check_count(stream, kind, offset, length)


def _check_count(stream: BinaryIO, kind: bytes, offset: int, length: int) -> None:
    at, entry = _COUNTED[kind]
    stream.seek(offset)
    head = stream.read(at + 4)
    if len(head) < at + 4:
        raise CorruptMedia(f"The movie's {kind.decode()} table is cut off.")
    if entry is None:  # elst: version 1 entries hold 64-bit times
        entry = 20 if head[0] == 1 else 12
    count = struct.unpack_from(">I", head, at)[0]
    if kind == b"stsz" and struct.unpack_from(">I", head, 4)[0]:
        return  # one size for every sample: no table follows
    if count * entry > length - at - 4:
        raise CorruptMedia(
            f"The movie's {kind.decode()} table declares more entries than it holds."
        )


def playable(path: str) -> Playable | None:
    """The longest time any audio or video track of the file plays from the bytes present, and
    whether any track has samples past the end of the file; ``None`` when the movie box cannot
    be read (or is beyond the caps)."""
    size = os.path.getsize(path)
    budget, walk = [_MAX_BOXES], [_MAX_WALK]
    tracks: list[Playable] = []
    with open(path, "rb") as stream:
        movie = next((b for b in _boxes(stream, 0, size, budget) if b[0] == b"moov"), None)
        if movie is None:
            return None
        for kind, offset, length in _boxes(stream, movie[1], movie[1] + movie[2], budget):
            if kind != b"trak":
                continue
            tables: dict[bytes, tuple[int, int]] = {}
            for child, child_offset, child_size in _leaves(
                stream, offset, length, _CONTAINERS, budget
            ):
                if child in _TABLES:
                    tables.setdefault(child, (child_offset, child_size))
            if b"hdlr" not in tables or b"mdhd" not in tables:
                continue
            stream.seek(tables[b"hdlr"][0] + 8)
            if stream.read(4) not in (b"soun", b"vide"):
                continue
            track = _track(stream, tables, size, walk)
            if track is None:
                return None
            tracks.append(track)
    if not tracks:
        return None
    return Playable(max(t.seconds for t in tracks), any(t.truncated for t in tracks))
