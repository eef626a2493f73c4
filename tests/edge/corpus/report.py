"""What the real-file corpus test found, gathered per route and printed as one table at the end."""

from __future__ import annotations

from conclave.platform.media_types import BUILT_IN_MEDIA_TYPES
from tests.edge.corpus.manifest import CorpusFile

RESULTS: dict[str, list[tuple[CorpusFile, str, list[str]]]] = {}
"""Per route: (entry, "accepted" or "refused", what was wrong) for every upload made."""


def summary_lines() -> list[str]:
    """The per-type table: files, fully right, refusals expected and held, files with problems."""
    if not RESULTS:
        return []
    lines = [
        f"{'route':<10} {'files':>5} {'right':>5} {'refusals':>8} {'held':>4}  gaps",
    ]
    totals = [0, 0, 0, 0]
    for route in (media.name for media in BUILT_IN_MEDIA_TYPES):
        rows = RESULTS.get(route, [])
        accepted = [p for _, o, p in rows if o == "accepted"]
        refused = [p for _, o, p in rows if o == "refused"]
        gaps = [e.name for e, _, p in rows if p]
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
