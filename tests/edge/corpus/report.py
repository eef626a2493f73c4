"""What the real-file corpus test found, gathered per route and printed as one table at the end."""

from __future__ import annotations

from conclave.platform.media_types import BUILT_IN_MEDIA_TYPES
from tests.edge.corpus.manifest import CorpusFile

RESULTS: dict[str, list[tuple[CorpusFile, str, list[str]]]] = {}
"""Per route: (entry, "accepted" or "refused", what was wrong) for every upload made."""

Rows = dict[str, list[tuple[str, str, list[str]]]]
"""Per route: (file name, "accepted" or "refused", what was wrong): plain values, which a test
process of a parallel run (pytest-xdist) sends to the one that prints the table."""


def plain_rows() -> Rows:
    """This process's :data:`RESULTS`, with each entry named by its file name."""
    return {route: [(e.name, o, p) for e, o, p in rows] for route, rows in RESULTS.items()}


def summary_lines(results: Rows) -> list[str]:
    """The per-type table: files, fully right, refusals expected and held, files with problems."""
    if not any(results.values()):
        return []
    lines = [
        f"{'route':<10} {'files':>5} {'right':>5} {'refusals':>8} {'held':>4}  gaps",
    ]
    totals = [0, 0, 0, 0]
    for route in (media.name for media in BUILT_IN_MEDIA_TYPES):
        rows = results.get(route, [])
        accepted = [p for _, o, p in rows if o == "accepted"]
        refused = [p for _, o, p in rows if o == "refused"]
        gaps = [name for name, _, p in rows if p]
        held = sum(not p for p in refused)
        counts = [len(accepted), sum(not p for p in accepted), len(refused), held]
        totals = [t + c for t, c in zip(totals, counts, strict=True)]
        lines.append(
            f"{route:<10} {counts[0]:>5} {counts[1]:>5} {counts[2]:>8} {counts[3]:>4}  "
            + ", ".join(gaps)
        )
    share = totals[1] / totals[0] if totals[0] else 0.0
    lines.append(
        f"{'all':<10} {totals[0]:>5} {totals[1]:>5} {totals[2]:>8} {totals[3]:>4}  "
        f"{share:.1%} of accepted-format files fully right"
    )
    return lines
