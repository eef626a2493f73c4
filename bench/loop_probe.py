"""What the event-loop lateness probe costs a service process (platform/event_loop_probe.py).

Run: ``.venv/bin/python -m bench.loop_probe [--seconds 10] [--steps 400000]``

1. Idle: the process CPU time of an event loop that does nothing for ``--seconds``, without the
   probe (baseline), with a plain ``asyncio.sleep`` loop at the probe's interval (what any timer
   costs), and with the probe (what the histogram adds to that).
2. Busy: the CPU time of a fixed amount of event-loop work (``--steps`` task switches in four
   tasks), without and with the probe, alternated; the ratio is what a serving process pays.

CPU time is the process's own (``time.process_time``): a wake-up of an idle process also costs the
kernel, which is counted there as system time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from conclave.platform.event_loop_probe import PROBE_INTERVAL_SECONDS, EventLoopProbe
from conclave.platform.metrics import ServiceMetrics


def _probe() -> EventLoopProbe:
    metrics = ServiceMetrics("bench")
    return EventLoopProbe(metrics.event_loop_lateness, metrics.event_loop_lateness_max)


async def _timer_loop() -> None:
    """The probe without its measurement: what waking an idle loop this often costs anyway."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + PROBE_INTERVAL_SECONDS
        await asyncio.sleep(PROBE_INTERVAL_SECONDS)
        max(0.0, loop.time() - due)


async def _idle(seconds: float, kind: str) -> float:
    """CPU seconds used while the loop idles for ``seconds`` with ``kind`` running."""
    probe, timer = _probe(), None
    started = time.process_time()
    if kind == "probe":
        probe.start()
    elif kind == "timer":
        timer = asyncio.create_task(_timer_loop())
    await asyncio.sleep(seconds)
    used = time.process_time() - started
    await probe.stop()
    if timer is not None:
        timer.cancel()
    return used


async def _busy(steps: int, with_probe: bool) -> float:
    """CPU seconds for ``steps`` task switches spread over four tasks."""

    async def switch(count: int) -> None:
        for _ in range(count):
            await asyncio.sleep(0)

    probe = _probe()
    if with_probe:
        probe.start()
    started = time.process_time()
    await asyncio.gather(*(switch(steps // 4) for _ in range(4)))
    used = time.process_time() - started
    await probe.stop()
    return used


def main(seconds: float, steps: int) -> None:
    wakeups = seconds / PROBE_INTERVAL_SECONDS
    idle: dict[str, list[float]] = {"none": [], "timer": [], "probe": []}
    for _ in range(2):
        for kind, runs in idle.items():
            runs.append(asyncio.run(_idle(seconds / 2, kind)))
    busy: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(5):
        for probed, runs in busy.items():
            runs.append(asyncio.run(_busy(steps, probed)))

    per_second = {kind: sum(runs) / seconds for kind, runs in idle.items()}
    per_wakeup = (per_second["probe"] - per_second["none"]) * seconds / wakeups
    timer_wakeup = (per_second["timer"] - per_second["none"]) * seconds / wakeups
    without, with_probe = statistics.median(busy[False]), statistics.median(busy[True])
    print(f"event-loop probe benchmark: {PROBE_INTERVAL_SECONDS * 1000:g} ms interval, "
          f"{seconds:g} s idle per kind, {steps:,} task switches x 5, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d')}")  # fmt: skip
    print("| measurement | CPU |")
    print("|---|---:|")
    print(f"| idle loop, no probe (baseline) | {per_second['none'] * 100:.3f} % of a core |")
    print(f"| idle loop, a plain 25 ms timer loop | {per_second['timer'] * 100:.3f} % of a core "
          f"({timer_wakeup * 1e6:.0f} µs per wake-up) |")  # fmt: skip
    print(f"| idle loop, the probe | {per_second['probe'] * 100:.3f} % of a core "
          f"({per_wakeup * 1e6:.0f} µs per wake-up) |")  # fmt: skip
    print(f"| busy loop, fixed work, no probe (baseline) | {without * 1000:.0f} ms |")
    print(f"| busy loop, fixed work, the probe | {with_probe * 1000:.0f} ms |")
    ratio = with_probe / without
    print(f"ratio busy loop with probe / without: {ratio:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=400_000)
    options = parser.parse_args()
    main(options.seconds, options.steps)
