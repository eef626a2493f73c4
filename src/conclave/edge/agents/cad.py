"""CAD agent: DXF in depth (ezdxf); DWG, IFC, STEP and STL identified with their basic facts."""

from __future__ import annotations

import itertools
import os
import re
import struct
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from ezdxf import disassemble, filemanagement, recover, units
from ezdxf.entities.insert import Insert
from ezdxf.lldxf.const import DXFError
from ezdxf.lldxf.tagger import binary_tags_loader
from ezdxf.lldxf.types import DXFTag
from ezdxf.math import BoundingBox, Vec3
from ezdxf.protocols import virtual_entities
from ezdxf.tools.codepage import toencoding

from conclave.edge.agents import step
from conclave.edge.agents.base import CorruptMedia, clean

# Release names of the $ACADVER / DWG version codes (AC1009 is shared by R11 and R12).
_RELEASES = {
    "AC1002": "R2.5",
    "AC1003": "R2.6",
    "AC1004": "R9",
    "AC1006": "R10",
    "AC1009": "R12",
    "AC1012": "R13",
    "AC1014": "R14",
    "AC1015": "R2000",
    "AC1018": "R2004",
    "AC1021": "R2007",
    "AC1024": "R2010",
    "AC1027": "R2013",
    "AC1032": "R2018",
}
_BINARY_DXF = b"AutoCAD Binary DXF\r\n\x1a\x00"
_MAX_TABLE_TAGS = 2_000_000
"""Tags read ahead for the HEADER and TABLES sections (they precede the drawing's content)."""
_MAX_TABLE_BYTES = 32 * 1024**2
"""Bytes of a binary DXF read for its HEADER and TABLES sections."""
_MAX_EXPLODED = 20_000
"""Entities visited (every block reference and MINSERT copy, every entity a block or a dimension
yields, whether or not it has geometry) while measuring extents exactly, block references
exploded, before extents fall back to measuring each block once: nested references and MINSERT
grids multiply (ten references ten levels deep are 10¹⁰ entities from a file of a few kilobytes,
a 30000 by 30000 MINSERT of an empty block 9·10⁸ copies that yield nothing) and exploding each
entity costs far more than reading it (docs/benchmarks.md)."""
_MAX_LISTED = 100
"""Layer names and entity types listed in the facts (the counts stay exact): a file of a few
hundred kilobytes can declare thousands of layers, each named with hundreds of characters, and
the facts are stored in the pack and sent in its event."""
_MAX_NAME = 255
"""Characters kept of a listed name: AutoCAD's limit for a layer name."""
# The white space after "endfacet" is a lookahead: it may be the one before the next "facet".
_STL_FACET = re.compile(rb"[^a-z](end)?facet(?=\s)", re.IGNORECASE)
_STL_FACET_LONGEST = len(b"\nendfacet ")
# Bytes no text has (C0 controls other than white space): an ASCII STL is text throughout.
_STL_NOT_TEXT = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f]")
_CHUNK = 1 << 20


class _FileTables:
    """What the file itself declares: its HEADER's $ACADVER and the names in its LAYER table.

    ezdxf describes the document it made of the file: it upgrades R13/R14 and pre-R12 files (an
    AC1003 file reads as AC1009) and adds the layers AutoCAD requires ("0", "Defpoints"). These
    come from the file's own tags instead, read with ezdxf's low-level tag loaders up to the end of
    the TABLES section.
    """

    def __init__(self) -> None:
        self.version: str | None = None
        self.codepage: str | None = None
        self.layers: list[str | bytes] = []

    def read(self, tags: Iterable[DXFTag]) -> None:
        section = table = expecting = variable = None
        in_layer = False
        for code, raw in itertools.islice(tags, _MAX_TABLE_TAGS):
            value = (raw.decode("latin-1") if isinstance(raw, bytes) else str(raw)).strip()
            if code == 0:
                in_layer = table == "LAYER" and value == "LAYER"
                expecting = value if value in ("SECTION", "TABLE") else None
                if value == "ENDSEC" and section == "TABLES":
                    return
                if value == "ENDTAB":
                    table = None
            elif code == 2 and expecting == "SECTION":
                section, expecting = value, None
                if section in ("BLOCKS", "ENTITIES", "OBJECTS"):
                    return  # past the tables (R12 files may have none at all)
            elif code == 2 and expecting == "TABLE":
                table, expecting = value, None
            elif code == 2 and in_layer:
                self.layers.append(raw.strip() if isinstance(raw, bytes) else value)
                in_layer = False
            elif section == "HEADER":
                if code == 9:
                    variable = value
                elif code == 1 and variable == "$ACADVER":
                    self.version = value
                elif code == 3 and variable == "$DWGCODEPAGE":
                    self.codepage = value

    def layer_names(self) -> list[str]:
        # R2007 and later files are UTF-8; older ones use the code page the header names.
        encoding = "utf-8" if (self.version or "") >= "AC1021" else toencoding(self.codepage or "")
        names = [n.decode(encoding, "replace") if isinstance(n, bytes) else n for n in self.layers]
        return _unique(names)


def _unique(names: Iterable[str]) -> list[str]:
    # AutoCAD compares symbol names without regard to case.
    seen: set[str] = set()
    result = []
    for name in names:
        if name.casefold() not in seen:
            seen.add(name.casefold())
            result.append(name)
    return result


def _file_tables(path: str) -> _FileTables:
    found = _FileTables()
    with open(path, "rb") as stream:
        binary = stream.read(len(_BINARY_DXF)) == _BINARY_DXF
        stream.seek(0)
        try:
            if binary:
                # ezdxf's binary loader takes bytes: only the start, where HEADER and TABLES are,
                # is handed to it (a tag cut at the end is a struct error: what was read stays).
                found.read(binary_tags_loader(stream.read(_MAX_TABLE_BYTES)))
            else:
                found.read(recover.bytes_loader(stream))
        except (DXFError, ValueError, UnicodeError, IndexError, struct.error):
            pass  # a broken tag structure: keep what was read; ezdxf's recovery reads the rest
    return found


class _BlockBoxes:
    """Extents with each block measured once: a reference's box is its block's box carried by the
    reference's transformation (the box around the turned box when the reference is rotated, so
    a little larger than the geometry), a MINSERT grid's box spans its corner copies. Linear in
    the file's size however deep blocks nest or however large a grid they declare."""

    def __init__(self, work: _Work) -> None:
        self._blocks: dict[str, BoundingBox] = {}
        self._open: set[str] = set()
        self._work = work

    def of(self, entities: Iterable[Any]) -> BoundingBox:
        box = BoundingBox()
        for entity in entities:
            self._work.spend(1)  # dimensions may share one block: theirs are not measured once
            if isinstance(entity, Insert):
                box.extend(self._reference(entity))
                box.extend(self.of(entity.attribs))
            elif _has_virtual_entities(entity):
                box.extend(self.of(virtual_entities(entity)))  # DIMENSION, LEADER, MLINE…
            else:
                primitive = disassemble.make_primitive(entity)
                if not primitive.is_empty:
                    box.extend(primitive.bbox())
        return box

    def _reference(self, insert: Insert) -> BoundingBox:
        name = insert.dxf.name
        if name in self._open:
            return BoundingBox()  # a block that contains itself (the audit reports it)
        if name not in self._blocks:
            block = insert.block()
            self._open.add(name)
            self._blocks[name] = self.of(block) if block is not None else BoundingBox()
            self._open.discard(name)
        inner = self._blocks[name]
        if not inner.has_data:
            return inner
        placed = BoundingBox(insert.matrix44().transform_vertices(inner.cube_vertices()))
        rows, columns = max(insert.dxf.row_count, 1), max(insert.dxf.column_count, 1)
        if rows == columns == 1:
            return placed
        box = BoundingBox()
        for row in {0, rows - 1}:
            for column in {0, columns - 1}:
                step = Vec3(column * insert.dxf.column_spacing, row * insert.dxf.row_spacing)
                offset = insert.ocs().to_wcs(step.rotate_deg(insert.dxf.rotation))
                box.extend([placed.extmin + offset, placed.extmax + offset])
        return box


class _TooMuchWork(Exception):
    """The extents measurement visited more entities than its budget allows."""


class _Work:
    """A budget of entities visited: spent before the work, so a loop that yields nothing (a
    MINSERT grid of an empty block) is counted too."""

    def __init__(self, budget: int) -> None:
        self.left = budget

    def spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise _TooMuchWork


def _decomposed(entities: Iterable[Any], work: _Work) -> Iterator[Any]:
    """ezdxf's ``disassemble.recursive_decompose`` with every visited entity paid for."""
    for entity in entities:
        work.spend(1)
        if isinstance(entity, Insert):
            dxf = entity.dxf
            if entity.mcount > 1:
                # ezdxf walks the whole grid of rows and columns, even where zero spacing makes the
                # copies coincide and only the distinct ones are yielded.
                work.spend(max(dxf.row_count, 1) * max(dxf.column_count, 1))
                yield from _decomposed(entity.multi_insert(), work)
            else:
                block = entity.block()
                work.spend(len(block) if block is not None else 0)
                yield from _decomposed(entity.attribs, work)
                yield from _decomposed(virtual_entities(entity), work)
        elif _has_virtual_entities(entity):
            yield from _decomposed(virtual_entities(entity), work)  # DIMENSION, LEADER, MLINE…
        else:
            yield entity


def _has_virtual_entities(entity: Any) -> bool:
    # ezdxf's SupportsVirtualEntities protocol, checked without isinstance(): a runtime protocol
    # check costs more than measuring a LINE.
    return hasattr(entity, "__virtual_entities__")


def _exploded_box(entity: Any, work: _Work) -> BoundingBox:
    """The exact box of one model-space entity, its block references exploded."""
    box = BoundingBox()
    for primitive in disassemble.to_primitives(_decomposed([entity], work)):
        if not primitive.is_empty:
            box.extend(primitive.bbox())
    return box


def _extents(doc: Any) -> list[float] | None:
    """``[min_x, min_y, max_x, max_y]`` of the model space's geometry, block references included
    (AutoCAD's $EXTMIN/$EXTMAX cover them too, but files carry stale or unset values there).

    Exact, block references exploded, for the entities measured within ``_MAX_EXPLODED`` entities
    visited; the entity that exceeds it (or nests deeper than Python's stack: a block containing
    itself) and those after it are measured with each block once, so the work done before is kept.
    """
    box = BoundingBox()
    work = _Work(_MAX_EXPLODED)
    entities = iter(doc.modelspace())
    for entity in entities:
        if not isinstance(entity, Insert) and not _has_virtual_entities(entity):
            work.left -= 1
            primitive = disassemble.make_primitive(entity)
            if not primitive.is_empty:
                box.extend(primitive.bbox())
            continue
        try:
            # Its own box: a reference given up half exploded must not leave copies behind.
            box.extend(_exploded_box(entity, work))
        except (_TooMuchWork, RecursionError):
            rest = itertools.chain([entity], entities)
            # Each block once: linear in the file's entities, unless dimensions share a block.
            try:
                box.extend(_BlockBoxes(_Work(_MAX_EXPLODED + 4 * len(doc.entitydb))).of(rest))
            except (_TooMuchWork, RecursionError):
                return None  # blocks nested deeper than Python's stack: no extents, not no file
            break
    if not box.has_data:
        return None
    return [box.extmin.x, box.extmin.y, box.extmax.x, box.extmax.y]


def _read_dxf(path: str) -> tuple[Any, Any, bool]:
    """The document, its audit, and whether it had to be recovered from a damaged structure."""
    try:
        doc = filemanagement.readfile(path)
        return doc, doc.audit(), False
    except (DXFError, ValueError, KeyError, IndexError, TypeError):
        pass  # field CAD apps write slightly broken DXF (empty handles, misplaced tags): recover
    doc, auditor = recover.readfile(path)
    return doc, auditor, True


def _dxf(path: str) -> dict[str, Any]:
    try:
        doc, auditor, recovered = _read_dxf(path)
        declared = _file_tables(path)
        msp = doc.modelspace()
        entities = Counter(entity.dxftype() for entity in msp)
        # A layer an entity names without a LAYER table entry is part of the file too (R12
        # files may have no TABLES section at all; AutoCAD creates such layers when loading).
        referenced = (entity.dxf.get("layer", "0") for entity in msp)
        layers = _unique(itertools.chain(declared.layer_names(), referenced))
        if recovered and not entities and declared.version is None and not declared.layers:
            # Recovery turns any bytes after a "0 SECTION" into an empty drawing; an empty
            # drawing is only believed when the file has a header or a layer table of its own.
            raise CorruptMedia("The DXF structure is broken and nothing could be recovered.")
        extents = _extents(doc)
    except (DXFError, OSError, ValueError, UnicodeError, IndexError, KeyError, TypeError) as exc:
        raise CorruptMedia(f"The DXF file cannot be read: {type(exc).__name__}.") from exc
    return {
        "format": "dxf",
        "version": declared.version,
        "release": _RELEASES.get(declared.version or ""),
        "units": units.unit_name(doc.header.get("$INSUNITS", 0)),
        "layers": [name[:_MAX_NAME] for name in layers[:_MAX_LISTED]],
        "layer_count": len(layers),
        "entity_counts": {
            kind[:_MAX_NAME]: count for kind, count in entities.most_common(_MAX_LISTED)
        },
        "entity_total": sum(entities.values()),
        "extents": extents,
        "recovered": recovered,
        "repairs": len(auditor.fixes),
        "errors": len(auditor.errors),
    }


def _stl_facets(stream: Any) -> Iterator[tuple[int, int]]:
    """``(facet, endfacet)`` counts per chunk of an ASCII STL; ``CorruptMedia`` at a byte no
    text has (a head that reads "solid … facet" followed by anything else is no STL)."""
    # Counted in chunks (an ASCII STL may be one long line); a match must start early enough in
    # the chunk to end inside it, else it is counted in the next one, which starts with this
    # chunk's tail.
    carry = b"\n"
    while chunk := stream.read(_CHUNK):
        if _STL_NOT_TEXT.search(chunk):
            raise CorruptMedia("The ASCII STL holds bytes that are not text.")
        data = carry + chunk
        cut = len(data) - _STL_FACET_LONGEST
        ends = [m.group(1) is not None for m in _STL_FACET.finditer(data) if m.start() < cut]
        yield len(ends) - sum(ends), sum(ends)
        carry = data[cut:] if cut > 0 else data
    ends = [m.group(1) is not None for m in _STL_FACET.finditer(carry + b"\n")]
    yield len(ends) - sum(ends), sum(ends)


def _stl(path: str) -> dict[str, Any]:
    with open(path, "rb") as stream:
        head = stream.read(84)
        size = os.fstat(stream.fileno()).st_size
        # A binary STL's size follows from its triangle count, whatever its 80-byte header says
        # (many exporters write "solid <name>" there); an ASCII one cannot match by chance.
        if len(head) == 84 and size == 84 + 50 * struct.unpack_from("<I", head, 80)[0]:
            triangles = struct.unpack_from("<I", head, 80)[0]
            return {"format": "stl", "encoding": "binary", "triangles": triangles}
        stream.seek(0)
        facets = ends = 0
        for opened, closed in _stl_facets(stream):
            facets, ends = facets + opened, ends + closed
        if facets != ends:
            raise CorruptMedia(f"The ASCII STL opens {facets} facets and closes {ends}.")
        return {"format": "stl", "encoding": "ascii", "triangles": facets}


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The CAD agent's summary."""
    if fmt == "dxf":
        facts = _dxf(path)
    elif fmt == "dwg":
        with open(path, "rb") as stream:
            version = stream.read(6).decode("ascii", "replace")
        facts = {"format": "dwg", "version": version, "release": _RELEASES.get(version)}
    elif fmt in ("ifc", "step"):
        facts = {"format": fmt, **step.summary(path)}
    else:
        facts = _stl(path)
    return clean(facts)
