"""The map of geotagged Evidence Packs: an equirectangular plot drawn on the server as inline SVG,
with no tiles and no script, so it works without the internet and under the console's policy.

The view is fitted to the points' bounds (with a margin, and at least a few degrees across, so a
single point or a tight cluster is not blown up to a meaningless scale); a graticule at a round
step in degrees carries its labels. Longitude is stretched by the cosine of the view's middle
latitude, as an equirectangular map centred there would be: shapes near the poles are not flattened.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

WIDTH = 960
"""The drawing's width in SVG units (it scales to the page)."""
_MIN_SPAN_DEGREES = 2.0
_MARGIN = 0.08
_STEPS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 90)
_LEFT = 66
"""Room at the left edge for the latitude labels."""
_BOTTOM = 24
"""Room at the bottom edge for the longitude labels."""
_TALLEST, _FLATTEST = 0.625, 0.3
"""Height over width the view is widened (or heightened) to stay within: one point, or points
along a meridian, would otherwise make a map taller than any screen."""


@dataclass(frozen=True)
class Point:
    """One pack on the map."""

    x: float
    y: float
    evidence_id: str
    label: str


@dataclass(frozen=True)
class Line:
    """A graticule line with its label, at ``(label_x, label_y)``."""

    x1: float
    y1: float
    x2: float
    y2: float
    label: str
    label_x: float
    label_y: float


@dataclass(frozen=True)
class EvidenceMap:
    """What the template draws."""

    width: int
    height: int
    points: list[Point]
    lines: list[Line]
    bounds: tuple[float, float, float, float]
    """West, south, east, north, in degrees."""


def _degrees(value: float, positive: str, negative: str) -> str:
    text = f"{abs(value):.2f}".rstrip("0").rstrip(".")
    if text == "0":
        return "0°"
    return f"{text}° {positive if value > 0 else negative}"


def _step(span: float) -> float:
    """A round graticule step giving about four to eight lines across ``span``."""
    return next((step for step in _STEPS if span / step <= 8), 90)


def _plottable(value: Any, bound: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and -bound <= number <= bound else None


def draw_map(packs: list[dict[str, Any]]) -> EvidenceMap | None:
    """The map of those ``packs`` (search summaries) that carry a ``position``; ``None`` when
    none does."""
    placed = []
    for pack in packs:
        position = pack.get("position")
        if not isinstance(position, dict):
            continue
        latitude = _plottable(position.get("latitude"), 90.0)
        longitude = _plottable(position.get("longitude"), 180.0)
        if latitude is not None and longitude is not None:
            placed.append((latitude, longitude, pack))
    if not placed:
        return None
    south, north = min(p[0] for p in placed), max(p[0] for p in placed)
    west, east = min(p[1] for p in placed), max(p[1] for p in placed)
    # Fitted with a margin, at least _MIN_SPAN_DEGREES each way, within the globe.
    grow_lat = max(_MIN_SPAN_DEGREES, (north - south) * (1 + 2 * _MARGIN)) - (north - south)
    grow_lon = max(_MIN_SPAN_DEGREES, (east - west) * (1 + 2 * _MARGIN)) - (east - west)
    south, north = max(-90.0, south - grow_lat / 2), min(90.0, north + grow_lat / 2)
    west, east = max(-180.0, west - grow_lon / 2), min(180.0, east + grow_lon / 2)
    stretch = max(0.2, math.cos(math.radians((south + north) / 2)))
    ratio = (north - south) / ((east - west) * stretch)
    if ratio > _TALLEST:  # widened about its middle, within the globe
        middle, half = (west + east) / 2, (north - south) / (_TALLEST * stretch) / 2
        west, east = max(-180.0, middle - half), min(180.0, middle + half)
    elif ratio < _FLATTEST:
        middle, half = (south + north) / 2, (east - west) * stretch * _FLATTEST / 2
        south, north = max(-90.0, middle - half), min(90.0, middle + half)
    plot_width = WIDTH - _LEFT
    scale = plot_width / ((east - west) * stretch)
    plot_height = min(max(120.0, (north - south) * scale), 1.5 * WIDTH)
    scale_y = plot_height / (north - south)
    height = round(plot_height) + _BOTTOM

    def x_of(longitude: float) -> float:
        return round(_LEFT + (longitude - west) * stretch * scale, 1)

    def y_of(latitude: float) -> float:
        return round((north - latitude) * scale_y, 1)

    lines = []
    step = _step(east - west)
    longitude = math.ceil(west / step) * step
    while longitude <= east + 1e-9:
        x = x_of(longitude)
        label = _degrees(longitude, "E", "W")
        lines.append(Line(x, 0, x, plot_height, label, x, plot_height + 14))
        longitude += step
    step = _step(north - south)
    latitude = math.ceil(south / step) * step
    while latitude <= north + 1e-9:
        y = y_of(latitude)
        label = _degrees(latitude, "N", "S")
        lines.append(Line(_LEFT, y, WIDTH, y, label, 2, y + 4))
        latitude += step
    points = [
        Point(
            x_of(longitude),
            y_of(latitude),
            str(pack.get("evidence_id", "")),
            f"{pack.get('filename', 'Evidence Pack')}, {pack.get('created_at', '')}, at "
            f"{_degrees(latitude, 'N', 'S')} {_degrees(longitude, 'E', 'W')}",
        )
        for latitude, longitude, pack in placed
    ]
    return EvidenceMap(WIDTH, height, points, lines, (west, south, east, north))
