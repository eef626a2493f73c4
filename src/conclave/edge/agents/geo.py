"""Geo agent: GeoJSON, GPX and KML/KMZ feature counts, geometry types and bounding box."""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import zipfile
from collections import Counter
from typing import IO, Any

import gpxpy.geo
from defusedxml import DefusedXmlException, ElementTree
from gpxpy import gpxfield

from conclave.edge.agents.base import CorruptMedia, MediaMismatch, clean

_MAX_KML_BYTES = 256 * 1024**2
_MAX_XML_DEPTH = 1000
"""Elements open at once in a GPX or KML document (real ones nest a dozen deep)."""
_KML_SLICE = 1 << 20
_KML_SPACE = re.compile(r"\s")
# Slices whose tuples all hold two ("lon,lat") or all three values ("lon,lat,alt").
_KML_UNIFORM = {
    width: re.compile(r"(?:\s*[^\s,]+" + r",[^\s,]+" * (width - 1) + r"(?=\s|\Z))*\s*")
    for width in (2, 3)
}
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

    def add_all(self, xs: list[float], ys: list[float]) -> None:
        if not xs:
            return
        box = self._box
        self.positions += len(xs)
        box[0], box[1] = min(box[0], min(xs)), min(box[1], min(ys))
        box[2], box[3] = max(box[2], max(xs)), max(box[3], max(ys))

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


# Where gpxpy looks for each (local names below the root): a point elsewhere, such as a
# track point inside an extension, is not one of the file's.
_GPX_PLACES = {
    ("trk",): "trk",
    ("trk", "trkseg"): "trkseg",
    ("trk", "trkseg", "trkpt"): "trkpt",
    ("rte",): "rte",
    ("rte", "rtept"): "rtept",
    ("wpt",): "wpt",
}
_GPX_POINT_TIME = ("trk", "trkseg", "trkpt", "time")


class _GpxReader:
    """The facts gpxpy would give, read in one streamed pass: each element leaves the tree once
    read (gpxpy builds the whole document, about 16 times a file of bare track points).

    Points count where gpxpy finds them: a track point in a segment of a track of the document,
    a route point in a route, a waypoint at the top; the time range is the first and last track
    point time in document order and the length the sum over segments of gpxpy's own 2-D
    distance between neighbours, so the figures equal gpxpy's.
    """

    def __init__(self) -> None:
        self.version: str | None = None
        self.creator: str | None = None
        self.counts: Counter[str] = Counter()
        self.extent = _Extent()
        self.time_start: datetime.datetime | None = None
        self.time_end: datetime.datetime | None = None
        self.length = 0.0
        self._previous: tuple[float, float] | None = None  # the segment's last track point
        self._point_time: str | None = None

    def read(self, stream: IO[bytes]) -> None:
        path: list[str] = []  # local names of the open elements, the root first
        open_elements: list[Any] = []
        events = ElementTree.iterparse(stream, events=("start", "end"), forbid_dtd=True)
        for event, element in events:
            if event == "start":
                if len(path) >= _MAX_XML_DEPTH:
                    raise CorruptMedia(f"The GPX nests elements deeper than {_MAX_XML_DEPTH}.")
                if not path:
                    self.version, self.creator = element.get("version"), element.get("creator")
                path.append(_local(element.tag))
                open_elements.append(element)
                if len(path) == 3 and path[1:] == ["trk", "trkseg"]:
                    self._previous = None
                continue
            if len(path) <= 5:
                self._end(tuple(path[1:]), element)
            path.pop()
            open_elements.pop()
            element.clear()
            if open_elements:
                open_elements[-1].remove(element)

    def _end(self, place: tuple[str, ...], element: Any) -> None:
        if place == _GPX_POINT_TIME:
            self._point_time = element.text
            return
        name = _GPX_PLACES.get(place)
        if name is None:
            return
        self.counts[name] += 1
        if name not in ("trkpt", "rtept", "wpt"):
            return
        try:
            latitude, longitude = float(element.get("lat")), float(element.get("lon"))
        except (TypeError, ValueError):
            raise CorruptMedia(f"A GPX {name} has no valid lat and lon.") from None
        self.extent.add(longitude, latitude)
        if name == "trkpt":
            self._track_point(latitude, longitude)

    def _track_point(self, latitude: float, longitude: float) -> None:
        if self._previous is not None:
            # gpxpy's length_2d: each point's distance_2d to the one before it.
            previous_latitude, previous_longitude = self._previous
            self.length += gpxpy.geo.distance(
                latitude, longitude, None, previous_latitude, previous_longitude, None
            )
        self._previous = (latitude, longitude)
        text, self._point_time = self._point_time, None
        # gpxpy reads a time it cannot parse as none.
        time = gpxfield.TIME_TYPE.from_string(text) if text else None
        if time is not None:
            self.time_start = self.time_start or time
            self.time_end = time


def _gpx(path: str) -> dict[str, Any]:
    reader = _GpxReader()
    try:
        with open(path, "rb") as stream:
            reader.read(stream)
    except (ElementTree.ParseError, DefusedXmlException) as exc:
        # A DTD is refused outright: GPX has none, and its entities would expand in memory.
        raise CorruptMedia(f"The GPX file cannot be read: {type(exc).__name__}.") from exc
    counts = reader.counts
    return {
        "format": "gpx",
        "version": reader.version,
        "creator": reader.creator,
        "feature_count": counts["trk"] + counts["rte"] + counts["wpt"],
        "geometry_types": {
            "track": counts["trk"],
            "route": counts["rte"],
            "waypoint": counts["wpt"],
        },
        "track_segments": counts["trkseg"],
        "track_points": counts["trkpt"],
        "route_points": counts["rtept"],
        "waypoints": counts["wpt"],
        # The box covers everything the file locates: tracks, routes and waypoints (gpxpy's
        # get_bounds() covers tracks only, so a planned route or a list of places had none).
        "bbox": reader.extent.bbox,
        "time_start": reader.time_start.isoformat() if reader.time_start else None,
        "time_end": reader.time_end.isoformat() if reader.time_end else None,
        "length_2d_m": round(reader.length, 2),
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
                    if len(open_elements) >= _MAX_XML_DEPTH:
                        raise CorruptMedia(f"The KML nests elements deeper than {_MAX_XML_DEPTH}.")
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
    # holds one "lon lat alt" position. A long <coordinates> is read a slice at a time, cut at
    # white space: a list of every tuple of a 240 MB text took 1.6 GB beside the text itself.
    if track:
        _kml_tuples([text], None, extent)
        return
    start, size = 0, len(text)
    while start < size:
        space = _KML_SPACE.search(text, start + _KML_SLICE)
        end = space.start() if space else size
        _kml_slice(text[start:end], extent)
        start = end


def _kml_slice(part: str, extent: _Extent) -> None:
    tuples = part.split()
    if not tuples:
        return
    width = part.count(",") // len(tuples) + 1
    if width in _KML_UNIFORM and _KML_UNIFORM[width].fullmatch(part):
        # Every tuple has the same number of values: they convert in one pass at C speed.
        try:
            values = list(map(float, part.replace(",", " ").split()))
        except ValueError:
            raise CorruptMedia("A KML coordinate is not a number pair.") from None
        extent.add_all(values[0::width], values[1::width])
    else:
        _kml_tuples(tuples, ",", extent)


def _kml_tuples(tuples: list[str], separator: str | None, extent: _Extent) -> None:
    for tuple_text in tuples:
        parts = tuple_text.split(separator, 2)
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
