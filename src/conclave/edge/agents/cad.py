"""CAD agent: DXF in depth (ezdxf); DWG, IFC, STEP and STL identified with their basic facts."""

from __future__ import annotations

import re
import struct
from collections import Counter
from typing import Any

from ezdxf import bbox, filemanagement, recover, units
from ezdxf.lldxf.const import DXFError, DXFStructureError

from conclave.edge.agents.base import CorruptMedia, clean

_DWG_RELEASES = {
    "AC1012": "R13", "AC1014": "R14", "AC1015": "R2000", "AC1018": "R2004",
    "AC1021": "R2007", "AC1024": "R2010", "AC1027": "R2013", "AC1032": "R2018",
}  # fmt: skip
_HEADER_BYTES = 65536
_UNSET = 1e19  # ezdxf and AutoCAD write 1e20 into $EXTMIN/$EXTMAX of an empty drawing


def _extents(doc: Any) -> list[float] | None:
    low, high = doc.header.get("$EXTMIN"), doc.header.get("$EXTMAX")
    if low is not None and high is not None and abs(low[0]) < _UNSET and abs(high[0]) < _UNSET:
        return [low[0], low[1], high[0], high[1]]
    box = bbox.extents(doc.modelspace(), fast=True)
    if not box.has_data:
        return None
    return [box.extmin.x, box.extmin.y, box.extmax.x, box.extmax.y]


def _read_dxf(path: str) -> tuple[Any, Any, bool]:
    """The document, its audit, and whether it had to be recovered from a damaged structure."""
    try:
        doc = filemanagement.readfile(path)
        return doc, doc.audit(), False
    except DXFStructureError:
        pass  # field CAD apps write slightly broken DXF: try ezdxf's recovery mode next
    doc, auditor = recover.readfile(path)
    if not any(True for _ in doc.modelspace()):
        raise CorruptMedia("The DXF structure is broken and nothing could be recovered.")
    return doc, auditor, True


def _dxf(path: str) -> dict[str, Any]:
    try:
        doc, auditor, recovered = _read_dxf(path)
    except (DXFError, OSError, ValueError, UnicodeError, IndexError, KeyError, TypeError) as exc:
        raise CorruptMedia(f"The DXF file cannot be read: {type(exc).__name__}.") from exc
    entities = Counter(entity.dxftype() for entity in doc.modelspace())
    layers = [layer.dxf.name for layer in doc.layers]
    return {
        "format": "dxf",
        "version": doc.dxfversion,
        "release": doc.acad_release,
        "units": units.unit_name(doc.header.get("$INSUNITS", 0)),
        "layers": layers,
        "layer_count": len(layers),
        "entity_counts": dict(entities.most_common()),
        "entity_total": sum(entities.values()),
        "extents": _extents(doc),
        "recovered": recovered,
        "repairs": len(auditor.fixes),
        "errors": len(auditor.errors),
    }


def _step(path: str, fmt: str) -> dict[str, Any]:
    with open(path, "rb") as stream:
        header = stream.read(_HEADER_BYTES).decode("latin-1")
        entities = header.count("\n#")
        tail = header[-16:]
        while chunk := stream.read(1024 * 1024):
            entities += (tail + chunk.decode("latin-1")).count("\n#")
            tail = chunk[-16:].decode("latin-1")
    schema = re.search(r"FILE_SCHEMA\s*\(\s*\(\s*'([^']*)'", header)
    # FILE_NAME(name, time_stamp, (authors), (organizations), preprocessor, originating_system,
    # authorization): authors and organizations are lists, so fields are strings or (...).
    system = re.search(r"FILE_NAME\s*\((?:\s*(?:'[^']*'|\([^)]*\))\s*,){5}\s*'([^']*)'", header)
    return {
        "format": fmt,
        "schema": schema.group(1) if schema else None,
        "originating_system": system.group(1) if system else None,
        "entity_instances": entities,
    }


def _stl(path: str) -> dict[str, Any]:
    with open(path, "rb") as stream:
        head = stream.read(84)
        if not head.lstrip().startswith(b"solid") or b"facet" not in head + stream.read(512):
            return {
                "format": "stl",
                "encoding": "binary",
                "triangles": struct.unpack_from("<I", head, 80)[0],
            }
        stream.seek(0)
        triangles = sum(line.lstrip().startswith(b"facet") for line in stream)
    return {"format": "stl", "encoding": "ascii", "triangles": triangles}


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The CAD agent's summary."""
    if fmt == "dxf":
        facts = _dxf(path)
    elif fmt == "dwg":
        with open(path, "rb") as stream:
            version = stream.read(6).decode("ascii", "replace")
        facts = {"format": "dwg", "version": version, "release": _DWG_RELEASES.get(version)}
    elif fmt in ("ifc", "step"):
        facts = _step(path, fmt)
    else:
        facts = _stl(path)
    return clean(facts)
