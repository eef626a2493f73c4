"""The evidence map's drawing (:mod:`conclave.console.evidence_map`): fitted, labelled, bounded,
and indifferent to positions no one could plot."""

from __future__ import annotations

import math

from conclave.console.evidence_map import WIDTH, draw_map


def _pack(n: int, latitude, longitude) -> dict:
    return {
        "evidence_id": f"id-{n}",
        "filename": f"f{n}.jpg",
        "created_at": "2026-01-01T00:00:00Z",
        "position": {"latitude": latitude, "longitude": longitude, "source": "exif"},
    }


def test_one_point_is_centred_in_a_view_a_few_degrees_wide() -> None:
    """2 degrees of latitude, widened in longitude so the map is wider than tall."""
    drawn = draw_map([_pack(1, 45.0, 7.0)])
    assert drawn is not None
    [point] = drawn.points
    west, south, east, north = drawn.bounds
    assert math.isclose(north - south, 2.0) and east - west > 2.0
    assert math.isclose((west + east) / 2, 7.0) and math.isclose((south + north) / 2, 45.0)
    assert drawn.height < 0.7 * drawn.width
    assert 0 < point.x < drawn.width and 0 < point.y < drawn.height
    assert point.label == "f1.jpg, 2026-01-01T00:00:00Z, at 45° N 7° E"
    assert {line.label for line in drawn.lines} >= {"45° N", "7° E"}


def test_the_whole_globe_stays_within_it_and_the_drawing() -> None:
    drawn = draw_map([_pack(1, -89.9, -179.9), _pack(2, 89.9, 179.9), _pack(3, 0, 0)])
    assert drawn is not None
    assert drawn.bounds == (-180.0, -90.0, 180.0, 90.0)
    for point in drawn.points:
        assert 0 <= point.x <= WIDTH and 0 <= point.y <= drawn.height
    assert drawn.height <= 1.5 * WIDTH + 40
    assert len(drawn.lines) <= 20  # a round step, not a line per degree


def test_positions_no_one_could_plot_are_left_out() -> None:
    packs = [
        _pack(1, math.nan, 1.0),
        _pack(2, math.inf, 1.0),
        _pack(3, True, 1.0),
        _pack(4, "45", 1.0),
        _pack(5, 91.0, 1.0),
        _pack(6, 10.0, -181.0),
        {"evidence_id": "x", "position": None},
        {"evidence_id": "y", "position": "here"},
        {"evidence_id": "z"},
    ]
    assert draw_map(packs) is None
    drawn = draw_map([*packs, _pack(7, -33.86, 151.2)])
    assert drawn is not None and [point.evidence_id for point in drawn.points] == ["id-7"]
