"""A PNG's chunk layout, read from the chunk headers alone: what the image agent can skip.

Two checks cost most of a small PNG's parse, and most PNGs need neither (issue 20: the edge's CPU
per upload):

- **EXIF.** Pillow looks for an ``eXIf`` chunk after the image data by decoding the whole image
  first (``getexif`` calls ``load``). A PNG with no ``eXIf`` chunk and no text chunk after its
  image data has no EXIF beyond what Pillow read at open (a ``Raw profile type exif`` text
  chunk before the data), so nothing needs decoding.
- **Content credentials.** C2PA embeds a manifest store in a ``caBX`` chunk, or points at a
  remote one from XMP (an ``iTXt`` chunk with the keyword ``XML:com.adobe.xmp``). A PNG with
  neither carries no manifest, and c2pa need not hash the file to say so.

Only headers are read (eight bytes per chunk, and a text chunk's keyword); a file whose chunk
sequence does not parse within :data:`MAX_CHUNKS` gets no layout, and the agent does every check
as before. Pillow's ``verify`` still checks every chunk's CRC.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_CHUNKS = 4096
"""More chunks than this and the layout is not read (the full checks run instead)."""
TEXT_CHUNKS = frozenset({b"tEXt", b"zTXt", b"iTXt"})
XMP_KEYWORD = b"XML:com.adobe.xmp"
_KEYWORD_BYTES = 80  # PNG keywords are 1-79 bytes, then NUL


@dataclass(frozen=True)
class PngLayout:
    """What a PNG's chunk headers say."""

    has_exif_chunk: bool
    text_after_data: bool
    has_manifest_chunk: bool
    has_xmp: bool
    frame_controls: int = 0
    """How many ``fcTL`` chunks (an APNG's frames) the file holds: its ``acTL`` chunk only
    claims a count, which Pillow reports as is."""
    has_image_data: bool = True
    """Whether an ``IDAT`` chunk is there (a PNG without one has no image)."""

    @property
    def exif_needs_decoding(self) -> bool:
        """Whether Pillow must decode the image to find EXIF that may follow the data."""
        return self.has_exif_chunk or self.text_after_data

    @property
    def may_carry_credentials(self) -> bool:
        """Whether a C2PA manifest may be embedded or referenced."""
        return self.has_manifest_chunk or self.has_xmp


def png_layout(path: str) -> PngLayout | None:
    """The layout of the PNG at ``path``, or ``None`` when its chunks do not read cleanly."""
    exif = text_after = manifest = xmp = seen_data = False
    frames = 0
    with open(path, "rb") as stream:
        if stream.read(8) != SIGNATURE:
            return None
        for _ in range(MAX_CHUNKS):
            header = stream.read(8)
            if len(header) < 8:
                return None  # ended without IEND
            length, kind = struct.unpack(">I4s", header)
            if kind == b"IEND":
                return PngLayout(exif, text_after, manifest, xmp, frames, seen_data)
            start = stream.tell()
            if kind == b"IDAT":
                seen_data = True
            elif kind == b"eXIf":
                exif = True
            elif kind == b"fcTL":
                frames += 1
            elif kind == b"caBX":
                manifest = True
            elif kind in TEXT_CHUNKS:
                text_after = text_after or seen_data
                keyword = stream.read(min(length, _KEYWORD_BYTES)).split(b"\x00", 1)[0]
                xmp = xmp or keyword == XMP_KEYWORD
            stream.seek(start + length + 4)  # the data, then the CRC
    return None
