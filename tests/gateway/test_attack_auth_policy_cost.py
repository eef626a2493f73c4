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
    started = time.perf_counter()
    policy.allows(Subject("ada"), hostile, "list")
    took = time.perf_counter() - started
    assert took < 0.1, f"one policy decision took {took:.2f} s on the event loop"
