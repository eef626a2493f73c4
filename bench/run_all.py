"""Run every service benchmark in one go and write the results into ``docs/benchmarks.md``.

Run: ``.venv/bin/python -m bench.run_all [--quick] [--only gateway,graph] [--no-write]``

Each benchmark runs as its own process, one after the other (they would share the two cores
otherwise), with run lengths chosen so that the whole set takes under half an hour on a 2-core
machine (three minutes of it ``semantic_search``, most of that filling its million-point shard,
and six to eight ``tlog_proofs``, most of that bulk-building and checking its 10-million-leaf
log); ``--quick`` shortens them further for a smoke run. The generated part of
``docs/benchmarks.md`` (between the two ``run_all`` markers) is replaced: the machine, each
benchmark's printed figures next to its same-run baseline, and every target of the service issues
marked met or not. The hand-written history and analysis below the markers is left alone.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.report import Verdict

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN = "<!-- run_all:begin -->"
END = "<!-- run_all:end -->"


@dataclass(frozen=True)
class Benchmark:
    name: str
    title: str
    args: list[str]
    quick_args: list[str]
    timeout: float


BENCHMARKS = [
    Benchmark(
        "gateway", "Tool gateway (issues 2 and 7)", ["--seconds", "6"], ["--seconds", "2"], 180
    ),
    Benchmark("graph", "Graph dispatch (issue 6)", ["--seconds", "6"], ["--seconds", "2"], 180),
    Benchmark(
        "edge", "Edge intake (issue 3)",
        ["--seconds", "6", "--large-runs", "2"], ["--seconds", "2", "--large-runs", "1"], 300,
    ),
    Benchmark(
        "edge_replicas", "Edge replicas on one PostgreSQL: lock waits (issue 20)",
        ["--seconds", "6"], ["--seconds", "2"], 180,
    ),
    Benchmark(
        "edge_client", "Edge client outbox (issue 4)",
        ["--items", "400", "--rounds", "2"], ["--items", "60", "--rounds", "1"], 240,
    ),
    Benchmark(
        "collector", "Expedition service (issue 5)",
        ["--records", "100000", "--starts", "150", "--uploads", "20"],
        ["--records", "5000", "--starts", "30", "--uploads", "5"], 300,
    ),
    Benchmark(
        "embedding", "Embedders (issue 19)",
        ["--records", "20000", "--repeats", "5", "--minilm-records", "512"],
        ["--records", "2000", "--repeats", "1", "--minilm-records", "64"], 300,
    ),
    Benchmark(
        "semantic_search", "Semantic search at 1M points (issue 19)",
        ["--points", "1000000", "--queries", "200"], ["--points", "100000", "--queries", "30"], 600,
    ),
    Benchmark(
        "audit_search", "Audit trail search at 1M rows (issue 21)",
        ["--rows", "1000000", "--samples", "200"], ["--rows", "100000", "--samples", "50"], 300,
    ),
    Benchmark(
        "console", "Operator console pages at 1M audit rows (issue 21)",
        ["--rows", "1000000", "--samples", "200"], ["--rows", "100000", "--samples", "50"], 300,
    ),
    Benchmark(
        "tlog_proofs", "Transparency-log proofs at 10M leaves (issue 20)",
        ["--leaves", "10000000", "--samples", "2000"], ["--leaves", "200000", "--samples", "300"],
        1200,
    ),
]  # fmt: skip


@dataclass
class Outcome:
    benchmark: Benchmark
    args: list[str]
    seconds: float
    returncode: int
    lines: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)


def run(benchmark: Benchmark, quick: bool) -> Outcome:
    """Run one benchmark as a process; keep its printed figures and its verdicts."""
    args = benchmark.quick_args if quick else benchmark.args
    command = [sys.executable, "-m", f"bench.{benchmark.name}", *args]
    print(f"== {' '.join(command[1:])}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=benchmark.timeout
        )
        output, code = done.stdout, done.returncode
        if code != 0:
            output += "\n" + done.stderr[-3000:]
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        output += f"\n(stopped after {benchmark.timeout:.0f} s)"
        code = -1
    outcome = Outcome(benchmark, args, time.monotonic() - started, code)
    for line in output.splitlines():
        verdict = Verdict.parse(line)
        if verdict is None:
            outcome.lines.append(line)
        else:
            outcome.verdicts.append(verdict)
    print(f"   {outcome.seconds:.0f} s, exit {code}", file=sys.stderr, flush=True)
    return outcome


def machine() -> str:
    """One paragraph describing what the figures were measured on."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        memory_kib = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        memory_kib = 0
    load = os.getloadavg()[0]
    return (
        f"{os.cpu_count()} CPUs ({model}), {memory_kib / 1024 / 1024:.0f} GiB RAM, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}; "
        f"PostgreSQL and Redis on loopback, load average {load:.1f} when the run started"
    )


def render(outcomes: list[Outcome], description: str, total: float, quick: bool) -> str:
    """The generated section of ``docs/benchmarks.md``."""
    day = time.strftime("%Y-%m-%d")
    kind = "quick run (shortened; not for comparison)" if quick else "full run"
    out = [
        BEGIN,
        "## Latest `bench/run_all` results",
        "",
        f"Generated by `python -m bench.run_all` on {day} ({kind}, {total / 60:.1f} min in all). "
        f"Machine: {description}. Every benchmark measures its baseline in the same run; each "
        "ran alone, one after the other.",
        "",
        "| target | measured | goal | verdict |",
        "|---|---|---|---|",
    ]
    for outcome in outcomes:
        for verdict in outcome.verdicts:
            mark = "met" if verdict.met else "**not met**"
            out.append(f"| {verdict.name} | {verdict.measured} | {verdict.goal} | {mark} |")
        if not outcome.verdicts:
            out.append(f"| {outcome.benchmark.title} | did not finish | | **not measured** |")
    for outcome in outcomes:
        command = " ".join(["python -m", f"bench.{outcome.benchmark.name}", *outcome.args])
        out += [
            "",
            f"### {outcome.benchmark.title}",
            "",
            f"`{command}`: {outcome.seconds:.0f} s, exit status {outcome.returncode}.",
            "",
            "```",
            *[line.rstrip() for line in outcome.lines if line.strip()],
            "```",
        ]
    out.append(END)
    return "\n".join(out)


def write(section: str) -> None:
    """Replace the generated section of the document (or put it after the title)."""
    text = DOC.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + section + tail
    else:
        title, _, body = text.partition("\n")
        text = f"{title}\n\n{section}\n{body}"
    DOC.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short runs, for a smoke test")
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--no-write", action="store_true", help="print, do not edit the docs")
    options = parser.parse_args()
    wanted = {name for name in options.only.split(",") if name}
    chosen = [b for b in BENCHMARKS if not wanted or b.name in wanted]
    description = machine()
    started = time.monotonic()
    outcomes = [run(benchmark, options.quick) for benchmark in chosen]
    section = render(outcomes, description, time.monotonic() - started, options.quick)
    if options.no_write:
        print(section)
    else:
        write(section)
        print(f"wrote {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0 if all(o.returncode == 0 for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
