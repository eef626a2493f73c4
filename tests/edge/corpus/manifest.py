"""The corpus manifests: which real files, where they come from, and what an independent tool says
they are.

One TOML file per media type (``tests/edge/corpus/<type>.toml``), a ``[[file]]`` table each:

```toml
[[file]]
source = "pypi:mutagen==1.48.1"        # the archive that carries it (see sources.py)
path = "mutagen-1.48.1/tests/data/silence-44-s.flac"   # inside the archive ("!" descends)
sha256 = "…"                            # of the file itself
route = "audio"                         # the upload route it is sent to
expect = "accepted"                     # or "refused" (then `status`, and `code` if it matters)
truth = "ffprobe 5.1.9"                 # the independent tool the facts were read with
classes = ["flac"]                      # what the file stands for (reported per class)
refused_on = ["video"]                  # other routes that must refuse it with a 4xx problem
absent = ["exif.gps"]                   # facts that must be missing or null
[file.facts]                            # dotted paths into the pack's `extracted` (list index: 0)
duration_s = 3.684
"exif.gps.latitude" = 48.1
[file.tolerance]                        # absolute tolerance per numeric fact (default: 1e-6 rel.)
duration_s = 0.02
```

A file that does not yet meet its facts carries ``known_gap = "<why>"``: it counts against the
target and the test fails once it passes, so the mark cannot outlive the gap.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).parent
_ABSENT = object()


@dataclass(frozen=True)
class CorpusFile:
    """One real file and what is expected of it."""

    source: str
    path: str
    sha256: str
    route: str
    expect: str
    truth: str = ""
    artifact: str | None = None
    status: int | None = None
    code: str | None = None
    classes: tuple[str, ...] = ()
    refused_on: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)
    tolerance: dict[str, float] = field(default_factory=dict)
    known_gap: str | None = None

    @property
    def name(self) -> str:
        """A short label: the file name inside its archive."""
        return self.path.rsplit("/", 1)[-1].rsplit("!", 1)[-1]


def load(media_type: str | None = None) -> list[CorpusFile]:
    """Every manifest entry (of one route's manifest when ``media_type`` is given)."""
    pattern = f"{media_type}.toml" if media_type else "*.toml"
    entries = []
    for path in sorted(FOLDER.glob(pattern)):
        for raw in tomllib.loads(path.read_text()).get("file", []):
            for key in ("classes", "refused_on", "absent"):
                raw[key] = tuple(raw.get(key, ()))
            entries.append(CorpusFile(**raw))
    return entries


def _lookup(document: Any, dotted: str) -> Any:
    value = document
    for part in dotted.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _ABSENT
    return value


def _same(expected: Any, actual: Any, tolerance: float | None) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        if tolerance is not None:
            return abs(expected - actual) <= tolerance
        return math.isclose(expected, actual, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            _same(e, a, tolerance) for e, a in zip(expected, actual, strict=True)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(
            _same(expected[k], actual[k], tolerance) for k in expected
        )
    return bool(expected == actual)


def fact_mismatches(entry: CorpusFile, extracted: dict[str, Any]) -> list[str]:
    """What in ``extracted`` differs from the entry's facts, one line per fact."""
    problems = []
    for dotted, expected in entry.facts.items():
        actual = _lookup(extracted, dotted)
        if actual is _ABSENT or not _same(expected, actual, entry.tolerance.get(dotted)):
            shown = "missing" if actual is _ABSENT else repr(actual)
            problems.append(f"{dotted}: expected {expected!r}, got {shown}")
    for dotted in entry.absent:
        actual = _lookup(extracted, dotted)
        if actual is not _ABSENT and actual is not None:
            problems.append(f"{dotted}: expected absent, got {actual!r}")
    return problems
