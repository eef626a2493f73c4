"""Geo agent: GeoJSON, GPX and KML/KMZ feature counts, geometry types and bounding box."""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from typing import Any

import gpxpy
import gpxpy.gpx
from defusedxml import DefusedXmlException, ElementTree

from conclave.edge.agents.base import CorruptMedia, MediaMismatch, bbox_of, clean

_MAX_KML_BYTES = 256 * 1024**2
_KML_GEOMETRIES = {"Point", "LineString", "LinearRing", "Polygon", "MultiGeometry", "Track",
                   "MultiTrack", "Model"}  # fmt: skip


def _positions(coordinates: Any, out: list[tuple[float, float]]) -> None:
    # GeoJSON nests positions to any depth; a position is a list whose first item is a number.
    if isinstance(coordinates, list) and coordinates:
        if isinstance(coordinates[0], int | float) and len(coordinates) >= 2:
            out.append((float(coordinates[0]), float(coordinates[1])))
        else:
            for item in coordinates:
                _positions(item, out)


def _geojson(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as stream:
            document = json.load(stream)
    except (ValueError, RecursionError) as exc:
        raise CorruptMedia(f"The GeoJSON is not valid JSON: {type(exc).__name__}.") from exc
    if not isinstance(document, dict):
        raise CorruptMedia("The GeoJSON document is not an object.")
    kind = document.get("type")
    if kind == "FeatureCollection":
        features = document.get("features") or []
    elif kind == "Feature":
        features = [document]
    else:
        features = [{"type": "Feature", "geometry": document}]
    if not isinstance(features, list):
        raise CorruptMedia("`features` is not a list.")
    types: Counter[str] = Counter()
    points: list[tuple[float, float]] = []
    stack = [f.get("geometry") for f in features if isinstance(f, dict)]
    while stack:
        geometry = stack.pop()
        if not isinstance(geometry, dict):
            continue
        types[str(geometry.get("type"))[:32]] += 1
        if geometry.get("type") == "GeometryCollection":
            stack.extend(geometry.get("geometries") or [])
        else:
            _positions(geometry.get("coordinates"), points)
    return {
        "format": "geojson",
        "feature_count": len(features),
        "geometry_types": dict(types),
        "bbox": bbox_of(points),
        "positions": len(points),
    }


def _gpx_bbox(bounds: Any) -> list[float] | None:
    if bounds is None or bounds.min_longitude is None:
        return None
    return [bounds.min_longitude, bounds.min_latitude, bounds.max_longitude, bounds.max_latitude]


def _gpx(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            gpx = gpxpy.parse(stream)
    except (gpxpy.gpx.GPXException, ValueError) as exc:
        raise CorruptMedia(f"The GPX file cannot be read: {type(exc).__name__}.") from exc
    bounds = gpx.get_bounds()
    times = gpx.get_time_bounds()
    track_points = sum(len(s.points) for t in gpx.tracks for s in t.segments)
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
        "track_points": track_points,
        "bbox": _gpx_bbox(bounds),
        "time_start": times.start_time.isoformat() if times.start_time else None,
        "time_end": times.end_time.isoformat() if times.end_time else None,
        "length_2d_m": round(gpx.length_2d(), 2),
    }


def _kml_root(path: str, fmt: str) -> Any:
    try:
        if fmt == "kmz":
            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist() if n.lower().endswith(".kml")]
                if not names:
                    raise MediaMismatch("The ZIP archive holds no KML document.")
                name = "doc.kml" if "doc.kml" in names else names[0]
                if archive.getinfo(name).file_size > _MAX_KML_BYTES:
                    raise CorruptMedia("The KML inside the KMZ unpacks to more than 256 MiB.")
                return ElementTree.fromstring(archive.read(name))
        return ElementTree.parse(path).getroot()
    except (zipfile.BadZipFile, ElementTree.ParseError, DefusedXmlException, EOFError) as exc:
        raise CorruptMedia(f"The KML cannot be read: {type(exc).__name__}.") from exc


def _kml(path: str, fmt: str) -> dict[str, Any]:
    root = _kml_root(path, fmt)
    placemarks = 0
    types: Counter[str] = Counter()
    points: list[tuple[float, float]] = []
    for element in root.iter():
        name = element.tag.rsplit("}", 1)[-1]
        if name == "Placemark":
            placemarks += 1
        elif name in _KML_GEOMETRIES:
            types[name] += 1
        elif name in ("coordinates", "coord") and element.text:
            separator = "," if name == "coordinates" else None
            for tuple_text in element.text.split() if separator else [element.text]:
                parts = tuple_text.split(separator)
                try:
                    points.append((float(parts[0]), float(parts[1])))
                except (ValueError, IndexError):
                    raise CorruptMedia("A KML coordinate is not a number pair.") from None
    return {
        "format": fmt,
        "feature_count": placemarks,
        "geometry_types": dict(types),
        "bbox": bbox_of(points),
        "positions": len(points),
    }


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The geo agent's summary."""
    if fmt == "geojson":
        return clean(_geojson(path))
    if fmt == "gpx":
        return clean(_gpx(path))
    return clean(_kml(path, fmt))
