"""The aliasing rule and the catalogue entries of upstream MCP servers (no server needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conclave.gateway.backends.catalogue import load_catalogue
from conclave.gateway.registry import ToolRegistry
from conclave.gateway.upstreams.aliases import upstream_alias
from conclave.gateway.upstreams.config import McpServerSpec, UpstreamLimits
from conclave.gateway.upstreams.manager import Upstreams
from conclave.platform.egress import EgressPolicy

SAFE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _free(_name: str) -> bool:
    return False


@pytest.mark.parametrize(
    "tool",
    ["get_time", "dotted.name", "a name", "n" * 200, "émoji😀", "\ud800lone", "nul\x00", "", "-"],
)
def test_every_alias_is_provider_safe_and_stable(tool: str):
    alias = upstream_alias("srv", tool, _free)
    assert SAFE.match(alias)
    assert alias == upstream_alias("srv", tool, _free)  # every replica, every restart
    assert alias.startswith("srv__")


def test_plain_when_possible_hashed_when_sanitised_cut_or_taken():
    assert upstream_alias("time", "get_current_time", _free) == "time__get_current_time"
    dotted = upstream_alias("s", "a.b", _free)
    assert dotted != "s__a_b" and dotted.startswith("s__a_b_")
    assert upstream_alias("s", "a_b", _free) == "s__a_b"  # its sanitised twin stays plain
    taken = upstream_alias("s", "echo", lambda name: name == "s__echo")
    assert re.fullmatch(r"s__echo_[0-9a-f]{8}", taken)
    assert len(upstream_alias("s", "x" * 500, _free)) == 64
    assert upstream_alias("s", "x" * 500, _free) != upstream_alias("s", "x" * 501, _free)


def test_a_collision_after_hashing_takes_the_next_salt():
    first = upstream_alias("s", "a.b", _free)
    second = upstream_alias("s", "a.b", lambda name: name == first)
    assert second != first and SAFE.match(second)


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "bad_name", "transport": "stdio", "command": "x"},  # `_` would blur `__`
        {"name": "x" * 33, "transport": "stdio", "command": "x"},
        {"name": "h", "transport": "http"},
        {"name": "h", "transport": "http", "url": "file:///etc/passwd"},
        {"name": "h", "transport": "http", "url": "https://a.example", "command": "x"},
        {"name": "s", "transport": "stdio"},
        {"name": "s", "transport": "stdio", "command": "x", "url": "https://a.example"},
        {"name": "s", "transport": "stdio", "command": "x", "args": ["a\x00b"]},
        {"name": "s", "transport": "stdio", "command": "x", "rate_limit": "fast"},
        {"name": "s", "transport": "stdio", "command": "x", "secret": "unknown field"},
    ],
)
def test_bad_entries_are_refused_at_load(entry: dict[str, object]):
    with pytest.raises(ValueError):
        McpServerSpec.model_validate(entry)


def test_a_catalogue_may_hold_only_mcp_servers(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text("mcp_servers:\n  - {name: t, transport: stdio, command: mcp-server-time}\n")
    catalogue = load_catalogue(path)
    assert catalogue.tools == [] and catalogue.mcp_servers[0].name == "t"


def test_a_server_declared_twice_stops_the_start():
    spec = McpServerSpec(name="t", transport="stdio", command="x")
    limits = UpstreamLimits(max_message_bytes=65_536, max_tools=1, max_pages=1, debounce_seconds=0)
    with pytest.raises(ValueError, match="declared twice"):
        Upstreams([spec, spec], ToolRegistry(), EgressPolicy(), limits)
