"""Plug-ins: tools from a module path in settings and from the ``conclave.tools`` entry points."""

from __future__ import annotations

import pytest

from conclave.gateway.app import build_registry
from conclave.gateway.finance import Alias
from conclave.gateway.formats import wire_name
from conclave.gateway.registry import ToolRegistry
from conclave.gateway.tools import Tool
from tests.conftest import Backend, test_settings
from tests.gateway.conftest import GatewayClient


async def test_module_path_plugins_are_listed_and_executed(
    backend: Backend, gateway: GatewayClient
):
    modules = ["tests.gateway.plugin_tools", "tests.gateway.plugin_tools:make_tools"]
    async with gateway(tool_modules=modules) as client:
        names = {t["function"]["name"] for t in (await client.get("/tools")).json()["tools"]}
        assert {"shout", "whisper"} <= names
        response = await client.post("/execute", json={"tool": "shout", "args": {"text": "hi"}})
        assert response.json()["result"] == {"text": "HI"}
        response = await client.post("/execute", json={"tool": "whisper", "args": {"text": "HI"}})
        assert response.json()["result"] == {"text": "hi"}


def test_entry_point_plugins_are_loaded(tmp_path, monkeypatch: pytest.MonkeyPatch):
    dist = tmp_path / "billing_tools-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: billing-tools\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[conclave.tools]\nbilling = tests.gateway.plugin_tools:make_tools\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = build_registry(test_settings(load_entry_points=True))
    assert registry.resolve("whisper") is not None
    assert build_registry(test_settings()).resolve("whisper") is None  # off when disabled


async def _noop(_args, _ctx):
    return {}


@pytest.mark.parametrize(
    ("tool", "message"),
    [
        (Tool(name="bad name!", description="", executor=_noop), "must match"),
        (Tool(name="t", description="", executor=_noop, parameters={"type": "array"}), "object"),
        (
            Tool(
                name="t",
                description="",
                executor=_noop,
                parameters={"type": "object", "properties": {"a": {"type": "nope"}}},
            ),
            "invalid JSON Schema",
        ),
        (Tool(name="t", description=""), "exactly one of executor and cpu_executor"),
        (
            Tool(name="t", description="", executor=_noop, cpu_executor=lambda _a, _c: {}),
            "exactly one of executor and cpu_executor",
        ),
        (  # a worker process cannot receive a lambda or a closure
            Tool(name="t", description="", cpu_executor=lambda _a, _c: {}),
            "cpu_executor must be a function defined at module level",
        ),
    ],
)
def test_broken_plugins_fail_at_registration(tool: Tool, message: str):
    with pytest.raises(ValueError, match=message):
        ToolRegistry().register(tool)


def test_duplicate_names_are_refused():
    registry = ToolRegistry()
    registry.register(Tool(name="dup", description="", executor=_noop))
    with pytest.raises(ValueError, match="twice"):
        registry.register(Tool(name="dup", description="", executor=_noop))


def test_a_wire_alias_and_an_alias_tool_cannot_share_a_name():
    # Over MCP and the provider formats a dotted name is listed as its wire alias; an alias tool
    # of that name would shadow it (or be shadowed), so either order is refused.
    dotted = Tool(name="billing.count", description="", executor=_noop)
    taken_by_alias = Alias(
        name=wire_name(dotted.name),
        canonical="echo",
        description="",
        parameters={"type": "object"},
        rewrite=dict,
    )
    registry = ToolRegistry()
    registry.register(Tool(name="echo", description="", executor=_noop))
    registry.register(dotted)
    with pytest.raises(ValueError, match="twice"):
        registry.add_alias(taken_by_alias)
    registry = ToolRegistry()
    registry.register(Tool(name="echo", description="", executor=_noop))
    registry.add_alias(taken_by_alias)
    with pytest.raises(ValueError, match="already taken"):
        registry.register(dotted)
