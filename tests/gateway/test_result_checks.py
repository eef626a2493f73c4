"""The check a tool's result passes before it is stored and answered (gateway/results.py), on
results only an in-process tool can give."""

from __future__ import annotations

import time

from conclave.gateway.results import result_problem


def test_a_result_that_contains_itself_is_refused_at_once():
    """A tree whose root points back at itself (a plug-in's node with a parent link) is refused
    as soon as the encoder meets it again, not once it has been written out at every level up
    to the recursion limit (seconds of CPU and hundreds of MiB on the event loop; outside
    attack)."""
    node = {"children": [{"id": n, "label": f"item-{n}"} for n in range(10_000)]}
    node["parent"] = node
    started = time.thread_time()
    problem = result_problem(node, 1_000_000)
    spent = time.thread_time() - started
    assert problem is not None and problem.code == "OUTPUT_INVALID"
    assert "contains itself" in problem.message
    assert spent < 0.5, f"{spent:.2f} s of CPU to refuse a circular result"
