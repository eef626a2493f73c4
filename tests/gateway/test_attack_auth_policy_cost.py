"""Attack on the tool policy's matching cost (attack-auth): the upstream tool's own name, which
``upstream:<server>/<tool glob>`` selectors match, is not bounded like catalogue names."""

from __future__ import annotations

import time

from conclave.gateway.policy import PolicyRuleSpec, Subject, ToolPolicy
from conclave.gateway.tools import Tool


def test_attack_long_upstream_tool_name_makes_a_listing_block_the_event_loop():
    """docs/gateway.md promises glob cost bounded by "patterns 200 characters, names 128". But an
    upstream tool's ``upstream_origin`` name is the name the upstream MCP server listed, unbounded
    (upstreams/tools.py ``build_entries`` keeps ``listed.name`` whole; only the catalogue alias is
    hashed), and one listed message may be 2 MiB. With an ordinary rule such as
    ``upstream:*/*_admin_*`` a hostile upstream listing one tool named ``_admi`` * 400,000 makes the
    first GET /tools or MCP tools/list after each refresh (new Tool objects are judged anew; the
    upstream can trigger refreshes with list_changed) run ~2 s of glob loop on the event loop per
    such tool; ~55 s for a rule like ``upstream:*/*aaaa…b*``. Nothing else is served meanwhile."""
    rule = PolicyRuleSpec(effect="deny", subjects=["*"], tools=["upstream:*/*_admin_*"])
    policy = ToolPolicy([rule], default="allow")
    hostile = Tool(
        name="evil__h_0123abcd", description="", upstream_origin=("evil", "_admi" * 400_000)
    )
    # This thread's CPU time: the work that would hold the loop, not waits for a core.
    started = time.thread_time()
    policy.allows(Subject("ada"), hostile, "list")
    took = time.thread_time() - started
    assert took < 0.1, f"one policy decision took {took:.2f} s on the event loop"


def test_attack_policy_memory_keeps_every_tool_an_upstream_ever_served():
    """``ToolPolicy._selecting`` remembers each judged tool *object* by name and is cleared only at
    200,000 names. A hostile upstream that renames its tools on every refresh (one per
    GATEWAY_UPSTREAM_DEBOUNCE_SECONDS = 1 s via list_changed; up to 1,000 tools and 40 MB of
    listing per refresh) has every generation kept alive — Tool objects with their schemas — as
    soon as any caller lists tools: the refreshes' memory is never freed (here 2,000 retired
    tools of 100 KB schemas stay resident; at the cap it is gigabytes)."""
    import gc
    import tracemalloc

    rule = PolicyRuleSpec(effect="allow", subjects=["*"], tools=["tag:public"])
    policy = ToolPolicy([rule])
    anyone = Subject("ada")
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        for generation in range(20):  # 20 refreshes, each serving 100 freshly named tools
            served = [
                Tool(
                    name=f"evil__g{generation}_t{i}",
                    description="",
                    parameters={"type": "object", "description": f"{i}" + "x" * 100_000},
                    upstream_origin=("evil", f"g{generation}_t{i}"),
                )
                for i in range(100)
            ]
            for tool in served:  # a listing after the refresh
                policy.allows(anyone, tool, "list")
            del served  # the registry drops the previous generation
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - baseline
    finally:
        tracemalloc.stop()
    assert retained < 20_000_000, f"{retained / 1e6:.0f} MB of retired tools stay in memory"
