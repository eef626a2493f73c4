"""Landscape agent: raster maps and satellite imagery with their geo reference.

The geo reference comes from GeoTIFF tags (pixel scale, tie point, EPSG code), from EXIF GPS, and
from a map URL in the upload's metadata (``map_url``), whose bbox, centre, zoom or slippy-map tile
is parsed.
"""

from __future__ import annotations

import math
import operator
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from conclave.edge.agents.base import clean
from conclave.edge.agents.image import credentials_of, describe_image, describe_tiff
from conclave.edge.agents.png_chunks import png_layout
from conclave.edge.agents.tiff import TiffStructure, read_structure

_USER_DEFINED = 32767
"""GeoTIFF's code for "not an EPSG code: the CRS is described by further keys"."""
_UNITS = {9001: "metre", 9002: "foot", 9003: "us_survey_foot", 9101: "radian", 9102: "degree"}
_MAX_ZOOM = 30
"""Deepest web-map zoom level taken: a tile of about 4 cm at the equator."""
# ASCII: \d takes every script's digits.
_TILE = re.compile(r"/(\d{1,2})/(\d{1,8})/(\d{1,8})(?:@\dx)?(?:\.\w{2,5})?$", re.ASCII)
_OSM_HASH = re.compile(
    r"map=(\d{1,2}(?:\.\d{1,6})?)/(-?\d{1,3}(?:\.\d{1,15})?)/(-?\d{1,3}(?:\.\d{1,15})?)", re.ASCII
)


def _code(value: Any) -> int | None:
    # tifffile gives known codes as IntEnum members, others as plain ints, numpy integers when
    # the key directory has more than 1024 values, and tuples or text when malformed.
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _corners(structure: TiffStructure, point: bool) -> list[tuple[float, float]] | None:
    """Model coordinates of the raster's four outer corners, from the affine transformation or
    from a tie point and pixel scale."""
    # With PixelIsPoint the model point sits at a pixel's centre: the raster's outer edge is
    # half a pixel further out (as GDAL reads it).
    edge = -0.5 if point else 0.0
    columns = (edge, structure.width + edge)
    rows = (edge, structure.height + edge)
    matrix = structure.transformation
    if len(matrix) == 16:
        a, b, _c, d, e, f, _g, h = matrix[:8]
        return [(a * i + b * j + d, e * i + f * j + h) for i in columns for j in rows]
    scale, tie = structure.pixel_scale, structure.tiepoints
    if len(scale) >= 2 and len(tie) >= 6 and scale[0] and scale[1]:
        i0, j0, _k, x0, y0, _z = tie[:6]
        return [(x0 + (i - i0) * scale[0], y0 - (j - j0) * scale[1]) for i in columns for j in rows]
    return None


def geotiff_reference(structure: TiffStructure) -> dict[str, Any] | None:
    """CRS code, units, pixel scale, tie point or transformation, and bounds (in the CRS's units,
    ``[west, south, east, north]``) from a TIFF's GeoTIFF tags."""
    keys = structure.geo_keys
    if not (structure.tiepoints or structure.transformation or keys):
        return None
    model = {1: "projected", 2: "geographic", 3: "geocentric"}.get(
        _code(keys.get("GTModelTypeGeoKey")) or 0
    )
    projected = _code(keys.get("ProjectedCSTypeGeoKey"))
    geographic = _code(keys.get("GeographicTypeGeoKey"))
    code = projected if projected is not None else geographic
    if projected is not None or model == "projected":
        units = _code(keys.get("ProjLinearUnitsGeoKey"))
    else:
        units = _code(keys.get("GeogAngularUnitsGeoKey"))
    point = _code(keys.get("GTRasterTypeGeoKey")) == 2
    citation = next(
        (
            keys[name]
            for name in ("GTCitationGeoKey", "PCSCitationGeoKey", "GeogCitationGeoKey")
            if isinstance(keys.get(name), str)
        ),
        None,
    )
    reference: dict[str, Any] = {
        "kind": "geotiff",
        "epsg": code if code != _USER_DEFINED else None,
        "user_defined": code == _USER_DEFINED,
        "model_type": model,
        "raster_type": "pixel_is_point" if point else "pixel_is_area",
        "citation": citation,
        "crs_units": _UNITS.get(units, f"epsg:{units}") if units is not None else None,
    }
    if projected == _USER_DEFINED and geographic not in (None, _USER_DEFINED):
        reference["geographic_epsg"] = geographic  # the datum is known, the projection is not
    if len(structure.pixel_scale) >= 2:
        reference["pixel_scale"] = list(structure.pixel_scale[:2])
    if len(structure.tiepoints) >= 6:
        reference["tiepoint"] = list(structure.tiepoints[:6])
        reference["tiepoints"] = structure.tiepoint_count
    if len(structure.transformation) == 16:
        reference["transformation"] = list(structure.transformation)
    corners = _corners(structure, point)
    if corners:
        xs, ys = [x for x, _ in corners], [y for _, y in corners]
        reference["bounds"] = [min(xs), min(ys), max(xs), max(ys)]
    return reference


def _tile_bounds(zoom: int, x: int, y: int) -> list[float]:
    def lon(tx: int) -> float:
        tiles: int = 2**zoom  # zoom is never negative: the tile pattern's digits
        return tx / tiles * 360.0 - 180.0

    def lat(ty: int) -> float:
        return math.degrees(math.atan(math.sinh(math.pi * (1 - 2 * ty / 2**zoom))))

    return [lon(x), lat(y + 1), lon(x + 1), lat(y)]


def _floats(text: str, count: int) -> list[float] | None:
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        return None
    return values if len(values) == count and all(map(math.isfinite, values)) else None


def _centre(latitude: float, longitude: float) -> dict[str, float] | None:
    if -90 <= latitude <= 90 and -180 <= longitude <= 180:
        return {"latitude": latitude, "longitude": longitude}
    return None


def _bbox(text: str) -> list[float] | None:
    # west, south, east, north in degrees (OpenStreetMap's order); west > east crosses the
    # antimeridian. Other orders and projected units are not guessed at.
    values = _floats(text, 4)
    if values is None:
        return None
    west, south, east, north = values
    if -180 <= west <= 180 and -180 <= east <= 180 and -90 <= south <= north <= 90:
        return values
    return None


def _zoom(text: str) -> float | None:
    # ASCII digits only: str.isdigit takes "²", which float() then refuses.
    if re.fullmatch(r"[0-9]{1,2}(?:\.[0-9]{1,6})?", text, re.ASCII) and float(text) <= _MAX_ZOOM:
        return float(text)
    return None


def parse_map_url(url: str) -> dict[str, Any]:
    """What a map URL says about the area shown: bbox, centre, zoom, tile. A part that is out of
    range or unreadable is left out: the URL is the uploader's note, never a reason to refuse
    the file."""
    try:
        parts = urlsplit(url)
        found: dict[str, Any] = {"host": parts.hostname}
    except ValueError:  # an unclosed IPv6 literal, a bad port
        return {}
    query = {key.lower(): values[-1] for key, values in parse_qs(parts.query).items()}
    if "bbox" in query and (bbox := _bbox(query["bbox"])):
        found["bbox"] = bbox
    for key in ("center", "ll", "latlon"):
        if key in query and (pair := _floats(query[key], 2)) and (centre := _centre(*pair)):
            found["center"] = centre
    if (
        "lat" in query
        and "lon" in query
        and (pair := _floats(f"{query['lat']},{query['lon']}", 2))
        and (centre := _centre(*pair))
    ):
        found["center"] = centre
    if (zoom_text := query.get("zoom") or query.get("z")) and (
        zoom := _zoom(zoom_text)
    ) is not None:
        found["zoom"] = zoom
    if match := _OSM_HASH.search(parts.fragment):
        if (zoom := _zoom(match.group(1))) is not None:
            found["zoom"] = zoom
        if centre := _centre(float(match.group(2)), float(match.group(3))):
            found["center"] = centre
    if (match := _TILE.search(parts.path)) and int(match.group(1)) <= _MAX_ZOOM:
        zoom_level, x, y = (int(group) for group in match.groups())
        if x < 2**zoom_level and y < 2**zoom_level:
            found["tile"] = {"z": zoom_level, "x": x, "y": y}
            found["bbox"] = _tile_bounds(zoom_level, x, y)
    return found


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The landscape agent's summary."""
    references = []
    png = png_layout(path) if fmt == "png" else None
    if fmt == "tiff":
        structure = read_structure(path)
        facts = describe_tiff(path, structure)
        if geotiff := geotiff_reference(structure):
            references.append(geotiff)
    else:
        facts = describe_image(path, fmt, png)
    gps = facts.get("exif", {}).get("gps")
    if gps and not gps.get("invalid"):
        references.append({"kind": "exif_gps", **gps})
    map_url = metadata.get("map_url")
    if isinstance(map_url, str) and map_url.startswith(("http://", "https://")):
        shown = parse_map_url(map_url[:2048])
        if "center" in shown or "bbox" in shown:  # a host or zoom alone places nothing
            references.append({"kind": "map_url", **shown})
    facts["geo_reference"] = references
    facts["georeferenced"] = bool(references)
    if (credentials := credentials_of(path, facts, png)) is not None:
        facts["content_credentials"] = credentials
    return clean(facts)
