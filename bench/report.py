"""The line format in which every benchmark states a target's verdict (``bench.run_all`` reads it).

A benchmark prints its figures for people, then one ``TARGET`` line per target of its issue:
tab-separated name, measured value, the target, and ``met`` / ``not met``.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "TARGET\t"


@dataclass(frozen=True)
class Verdict:
    """One target of a service issue, measured."""

    name: str
    measured: str
    goal: str
    met: bool

    def line(self) -> str:
        return PREFIX + "\t".join((self.name, self.measured, self.goal, _word(self.met)))

    @classmethod
    def parse(cls, line: str) -> Verdict | None:
        """The verdict a ``TARGET`` line states, or ``None`` for any other line."""
        if not line.startswith(PREFIX):
            return None
        parts = line[len(PREFIX) :].split("\t")
        if len(parts) != 4:
            return None
        name, measured, goal, met = parts
        return cls(name, measured, goal, met == "met")


def target(name: str, measured: str, goal: str, met: bool) -> None:
    """Print the verdict on one target."""
    print(Verdict(name, measured, goal, met).line(), flush=True)


def _word(met: bool) -> str:
    return "met" if met else "not met"


def percentile(values: list[float], share: float) -> float:
    """The value at ``share`` (0.99: p99) of ``values``, nearest rank below."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]
