"""Landscape agent: raster maps and satellite imagery with their geo reference.

The geo reference comes from GeoTIFF tags (pixel scale, tie point, EPSG code), from EXIF GPS, and
from a map URL in the upload's metadata (``map_url``), whose bbox, centre, zoom or slippy-map tile
is parsed.
"""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from PIL import Image

from conclave.edge.agents.base import clean
from conclave.edge.agents.credentials import content_credentials
from conclave.edge.agents.image import describe_image

_PIXEL_SCALE, _TIEPOINT, _TRANSFORM, _GEOKEYS = 33550, 33922, 34264, 34735
_GEOGRAPHIC_TYPE, _PROJECTED_TYPE, _MODEL_TYPE = 2048, 3072, 1024
_TILE = re.compile(r"/(\d{1,2})/(\d{1,8})/(\d{1,8})(?:@\dx)?(?:\.\w{2,5})?$")
_OSM_HASH = re.compile(r"map=(\d{1,2}(?:\.\d+)?)/(-?\d+(?:\.\d+)?)/(-?\d+(?:\.\d+)?)")


def _geokeys(raw: tuple[int, ...]) -> dict[int, int]:
    keys: dict[int, int] = {}
    count = raw[3] if len(raw) >= 4 else 0
    for index in range(count):
        key, location, _count, value = raw[4 + 4 * index : 8 + 4 * index]
        if location == 0:  # the value is inline; others point into double/ascii tags
            keys[key] = value
    return keys


def geotiff_reference(path: str) -> dict[str, Any] | None:
    """EPSG code, pixel scale, tie point and bounds from GeoTIFF tags."""
    with Image.open(path) as image:
        tags = getattr(image, "tag_v2", None)
        if tags is None or (_TIEPOINT not in tags and _TRANSFORM not in tags):
            return None
        width, height = image.size
        keys = _geokeys(tuple(tags.get(_GEOKEYS, ())))
        reference: dict[str, Any] = {
            "kind": "geotiff",
            "epsg": keys.get(_PROJECTED_TYPE) or keys.get(_GEOGRAPHIC_TYPE),
            "model_type": {1: "projected", 2: "geographic", 3: "geocentric"}.get(
                keys.get(_MODEL_TYPE, 0)
            ),
        }
        scale = tuple(float(v) for v in tags.get(_PIXEL_SCALE, ()))
        tiepoint = tuple(float(v) for v in tags.get(_TIEPOINT, ()))
        if len(scale) >= 2 and len(tiepoint) >= 6:
            i, j, _k, x, y, _z = tiepoint[:6]
            west, north = x - i * scale[0], y + j * scale[1]
            east, south = west + width * scale[0], north - height * scale[1]
            reference.update(
                pixel_scale=list(scale[:2]),
                tiepoint=list(tiepoint[:6]),
                bounds=[west, south, east, north],
            )
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


def parse_map_url(url: str) -> dict[str, Any]:
    """What a map URL says about the area shown: bbox, centre, zoom, tile."""
    parts = urlsplit(url)
    query = {key.lower(): values[-1] for key, values in parse_qs(parts.query).items()}
    found: dict[str, Any] = {"host": parts.hostname}
    if "bbox" in query and (bbox := _floats(query["bbox"], 4)):
        found["bbox"] = bbox
    for key in ("center", "ll", "latlon"):
        if key in query and (centre := _floats(query[key], 2)):
            found["center"] = {"latitude": centre[0], "longitude": centre[1]}
    if (
        "lat" in query
        and "lon" in query
        and (centre := _floats(f"{query['lat']},{query['lon']}", 2))
    ):
        found["center"] = {"latitude": centre[0], "longitude": centre[1]}
    zoom = query.get("zoom") or query.get("z")
    if zoom and zoom.replace(".", "", 1).isdigit():
        found["zoom"] = float(zoom)
    if match := _OSM_HASH.search(parts.fragment):
        found["zoom"] = float(match.group(1))
        found["center"] = {"latitude": float(match.group(2)), "longitude": float(match.group(3))}
    if (match := _TILE.search(parts.path)) and int(match.group(1)) <= 30:
        zoom_level, x, y = (int(group) for group in match.groups())
        if x < 2**zoom_level and y < 2**zoom_level:
            found["tile"] = {"z": zoom_level, "x": x, "y": y}
            found["bbox"] = _tile_bounds(zoom_level, x, y)
    return found


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The landscape agent's summary."""
    if fmt == "jpeg2000":
        facts: dict[str, Any] = {"format": "JPEG2000"}
        try:
            facts.update(describe_image(path))
        except Exception:  # Pillow without OpenJPEG still identifies it
            facts["decoded"] = False
    else:
        facts = describe_image(path)
    references = []
    if fmt == "tiff" and (geotiff := geotiff_reference(path)):
        references.append(geotiff)
    gps = facts.get("exif", {}).get("gps")
    if gps and not gps.get("invalid"):
        references.append({"kind": "exif_gps", **gps})
    map_url = metadata.get("map_url")
    if isinstance(map_url, str) and map_url.startswith(("http://", "https://")):
        references.append({"kind": "map_url", **parse_map_url(map_url[:2048])})
    facts["geo_reference"] = references
    facts["georeferenced"] = bool(references)
    if (credentials := content_credentials(path)) is not None:
        facts["content_credentials"] = credentials
    return clean(facts)
