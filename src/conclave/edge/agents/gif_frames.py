"""The frames of a GIF, counted by walking its blocks within a budget.

Pillow counts a GIF's frames by seeking to each one, several Python calls per data sub-block:
seconds for a file of a million one-pixel frames or of one-byte sub-blocks (docs/benchmarks.md),
and the landscape route takes 2 GiB. This walk skips sub-blocks in one tight loop over a
buffered chunk and stops after :data:`MAX_BLOCKS` blocks, so the count is exact for any GIF an
encoder writes and a lower bound past that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

MAX_BLOCKS = 1 << 18
"""Blocks and sub-blocks walked per GIF, under a tenth of a second: enough for 64 MiB of image
data in an encoder's 255-byte sub-blocks (the image route takes 50 MiB), or some 30,000 frames
(each costs about 8: a control extension, a descriptor, code size, data and terminators)."""

_CHUNK = 1 << 20


@dataclass
class GifFrames:
    """How many frames the walk found, and whether it stopped before the end."""

    frames: int
    at_least: bool = False


class _Blocks:
    """A forward reader over a file that keeps one chunk in memory."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._base = stream.tell()
        self._buffer = b""
        self._position = 0
        self.steps = 0

    def _refill(self, wanted: int) -> None:
        self._base += self._position
        self._stream.seek(self._base)
        self._buffer = self._stream.read(max(_CHUNK, wanted))
        self._position = 0

    def read(self, size: int) -> bytes:
        self.steps += 1
        if self._position + size > len(self._buffer):
            self._refill(size)
        data = self._buffer[self._position : self._position + size]
        self._position += len(data)
        return data

    def skip_sub_blocks(self) -> bool:
        """Skip a chain of data sub-blocks through its terminator; ``False`` at the end of the
        file or of the budget."""
        while self.steps < MAX_BLOCKS:
            buffer, position, steps = self._buffer, self._position, self.steps
            end, limit = len(buffer), MAX_BLOCKS
            while position < end and steps < limit:
                size = buffer[position]
                position += size + 1
                steps += 1
                if not size:
                    self._position, self.steps = position, steps
                    return True
            self._position, self.steps = position, steps
            if steps < limit:
                self._refill(1)
                if not self._buffer:
                    return False
        return False


def count_frames(stream: BinaryIO) -> GifFrames:
    """The image descriptors of a GIF (stream at its start), read as Pillow reads them: unknown
    bytes between blocks are skipped, and a file cut short ends the count."""
    blocks = _Blocks(stream)
    screen = blocks.read(13)  # signature and logical screen descriptor
    if len(screen) == 13 and screen[10] & 0x80:
        blocks.read(3 << ((screen[10] & 7) + 1))  # global colour table
    frames = 0
    while blocks.steps < MAX_BLOCKS:
        introducer = blocks.read(1)
        if not introducer or introducer == b";":
            return GifFrames(frames)
        if introducer == b"!":
            if not blocks.read(1) or not blocks.skip_sub_blocks():
                break
        elif introducer == b",":
            descriptor = blocks.read(9)
            if len(descriptor) < 9:
                return GifFrames(frames)
            frames += 1
            if descriptor[8] & 0x80:
                blocks.read(3 << ((descriptor[8] & 7) + 1))  # local colour table
            if not blocks.read(1) or not blocks.skip_sub_blocks():  # LZW code size, data
                break
    return GifFrames(frames, at_least=blocks.steps >= MAX_BLOCKS)
