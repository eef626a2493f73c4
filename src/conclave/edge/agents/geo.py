"""Geo agent: GeoJSON, GPX and KML/KMZ feature counts, geometry types and bounding box."""

from __future__ import annotations

import contextlib
import json
import zipfile
from collections import Counter
from typing import IO, Any

import gpxpy
import gpxpy.gpx
from defusedxml import DefusedXmlException, ElementTree

from conclave.edge.agents.base import CorruptMedia, MediaMismatch, clean

_MAX_KML_BYTES = 256 * 1024**2
_KML_GEOMETRIES = {
    "Point",
    "LineString",
    "LinearRing",
    "Polygon",
    "MultiGeometry",
    "Track",
    "MultiTrack",
    "Model",
}
# A ring that bounds a polygon and a track of a multi-track are parts of one geometry, not
# geometries of their own (GeoJSON and OGR count the polygon, the multi-track).
_KML_PARTS = {"outerBoundaryIs", "innerBoundaryIs", "MultiTrack"}
_GEOJSON_TYPES = {
    "FeatureCollection",
    "Feature",
    "Point",
    "MultiPoint",
    "LineString",
    "MultiLineString",
    "Polygon",
    "MultiPolygon",
    "GeometryCollection",
}


class _Extent:
    """A running ``[min_x, min_y, max_x, max_y]`` (x = longitude): no list of every position."""

    def __init__(self) -> None:
        self.positions = 0
        self._box = [float("inf"), float("inf"), float("-inf"), float("-inf")]

    def add(self, x: float, y: float) -> None:
        box = self._box
        self.positions += 1
        box[0], box[1] = min(box[0], x), min(box[1], y)
        box[2], box[3] = max(box[2], x), max(box[3], y)

    @property
    def bbox(self) -> list[float] | None:
        return list(self._box) if self.positions else None


def _positions(coordinates: Any, extent: _Extent) -> None:
    # GeoJSON nests positions to any depth; a position is a list whose first item is a number.
    stack = [coordinates]
    while stack:
        item = stack.pop()
        if not isinstance(item, list) or not item:
            continue
        if isinstance(item[0], int | float) and not isinstance(item[0], bool):
            if len(item) >= 2 and isinstance(item[1], int | float):
                extent.add(float(item[0]), float(item[1]))
        else:
            stack.extend(item)


def _geojson(path: str) -> dict[str, Any]:
    # The whole document is parsed: the geo upload limit (100 MiB) bounds it, and Python's objects
    # for it stay well inside a parser worker's address space (about 6x the file's size).
    try:
        with open(path, "rb") as stream:
            document = json.load(stream)
    except (ValueError, RecursionError) as exc:
        raise CorruptMedia(f"The GeoJSON is not valid JSON: {type(exc).__name__}.") from exc
    kind = document.get("type") if isinstance(document, dict) else None
    if not isinstance(kind, str) or kind not in _GEOJSON_TYPES:
        # The sniffer takes a JSON object whose head shows GeoJSON's keys; only the whole
        # document can tell whether it is GeoJSON (RFC 7946: a "type" of its own at the top).
        raise MediaMismatch("The JSON document is not GeoJSON: it has no GeoJSON `type`.")
    if kind == "FeatureCollection":
        features = document.get("features") or []
    elif kind == "Feature":
        features = [document]
    else:
        features = [{"type": "Feature", "geometry": document}]
    if not isinstance(features, list):
        raise CorruptMedia("`features` is not a list.")
    types: Counter[str] = Counter()
    extent = _Extent()
    stack = [f.get("geometry") for f in features if isinstance(f, dict)]
    while stack:
        geometry = stack.pop()
        if not isinstance(geometry, dict):
            continue
        types[str(geometry.get("type"))[:32]] += 1
        if geometry.get("type") == "GeometryCollection":
            stack.extend(geometry.get("geometries") or [])
        else:
            _positions(geometry.get("coordinates"), extent)
    return {
        "format": "geojson",
        "feature_count": len(features),
        "geometry_types": dict(types),
        "bbox": extent.bbox,
        "positions": extent.positions,
    }


def _gpx(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            gpx = gpxpy.parse(stream)
    except (gpxpy.gpx.GPXException, ValueError) as exc:
        raise CorruptMedia(f"The GPX file cannot be read: {type(exc).__name__}.") from exc
    times = gpx.get_time_bounds()
    track_points = [p for t in gpx.tracks for s in t.segments for p in s.points]
    route_points = [p for r in gpx.routes for p in r.points]
    # The box covers everything the file locates: tracks, routes and waypoints (gpxpy's
    # get_bounds() covers tracks only, so a planned route or a list of places had none).
    extent = _Extent()
    for point in [*track_points, *route_points, *gpx.waypoints]:
        if point.longitude is not None and point.latitude is not None:
            extent.add(point.longitude, point.latitude)
    return {
        "format": "gpx",
        "version": gpx.version,
        "creator": gpx.creator,
        "feature_count": len(gpx.tracks) + len(gpx.routes) + len(gpx.waypoints),
        "geometry_types": {
            "track": len(gpx.tracks),
            "route": len(gpx.routes),
            "waypoint": len(gpx.waypoints),
        },
        "track_segments": sum(len(t.segments) for t in gpx.tracks),
        "track_points": len(track_points),
        "route_points": len(route_points),
        "waypoints": len(gpx.waypoints),
        "bbox": extent.bbox,
        "time_start": times.start_time.isoformat() if times.start_time else None,
        "time_end": times.end_time.isoformat() if times.end_time else None,
        "length_2d_m": round(gpx.length_2d(), 2),
    }


def _kml_stream(path: str, fmt: str, resources: contextlib.ExitStack) -> IO[bytes]:
    if fmt != "kmz":
        return resources.enter_context(open(path, "rb"))
    archive = resources.enter_context(zipfile.ZipFile(path))
    names = [n for n in archive.namelist() if n.lower().endswith(".kml")]
    if not names:
        raise MediaMismatch("The ZIP archive holds no KML document.")
    # Google Earth reads doc.kml, else the first KML in the archive.
    name = "doc.kml" if "doc.kml" in names else names[0]
    if archive.getinfo(name).file_size > _MAX_KML_BYTES:
        raise CorruptMedia("The KML inside the KMZ unpacks to more than 256 MiB.")
    return resources.enter_context(archive.open(name))


def _kml(path: str, fmt: str) -> dict[str, Any]:
    placemarks = 0
    types: Counter[str] = Counter()
    extent = _Extent()
    try:
        with contextlib.ExitStack() as resources:
            stream = _kml_stream(path, fmt, resources)
            # Streamed: each element leaves the tree once read, so memory stays flat in size.
            open_elements: list[Any] = []
            updates = 0  # open <Update> elements: what they hold edits features, is none
            for event, element in ElementTree.iterparse(stream, events=("start", "end")):
                name = _local(element.tag)
                if event == "start":
                    parent = _local(open_elements[-1].tag) if open_elements else ""
                    updates += name == "Update"
                    if not updates and name == "Placemark":
                        placemarks += 1
                    elif not updates and name in _KML_GEOMETRIES and parent not in _KML_PARTS:
                        types[name] += 1
                    open_elements.append(element)
                    continue
                open_elements.pop()
                if name in ("coordinates", "coord") and element.text and not updates:
                    _kml_positions(element.text, name == "coord", extent)
                updates -= name == "Update"
                element.clear()
                if open_elements:
                    open_elements[-1].remove(element)
    except (zipfile.BadZipFile, ElementTree.ParseError, DefusedXmlException, EOFError) as exc:
        raise CorruptMedia(f"The KML cannot be read: {type(exc).__name__}.") from exc
    return {
        "format": fmt,
        "feature_count": placemarks,
        "geometry_types": dict(types),
        "bbox": extent.bbox,
        "positions": extent.positions,
    }


def _local(tag: Any) -> str:
    # "{http://www.opengis.net/kml/2.2}Placemark" -> "Placemark"; comments have no string tag.
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _kml_positions(text: str, track: bool, extent: _Extent) -> None:
    # <coordinates> holds "lon,lat[,alt]" tuples separated by white space; gx:Track's <gx:coord>
    # holds one "lon lat alt" position.
    for tuple_text in [text] if track else text.split():
        parts = tuple_text.split(None if track else ",")
        try:
            extent.add(float(parts[0]), float(parts[1]))
        except (ValueError, IndexError):
            raise CorruptMedia("A KML coordinate is not a number pair.") from None


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The geo agent's summary."""
    if fmt == "geojson":
        return clean(_geojson(path))
    if fmt == "gpx":
        return clean(_gpx(path))
    return clean(_kml(path, fmt))
