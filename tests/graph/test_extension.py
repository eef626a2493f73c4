"""Deployments extend the dispatch graph with their own nodes and conditional edges."""

from __future__ import annotations

from tests.graph.conftest import graph_app, graph_settings
from tests.graph.extension_example import add_weather


async def test_a_custom_node_behind_a_conditional_edge_changes_the_route(embedded) -> None:
    async with graph_app(embedded, graph_settings(), extensions=[add_weather]) as (client, _app):
        weather = (await client.post("/dispatch", json={"query": "weather in Rome?"})).json()
        other = (await client.post("/dispatch", json={"query": "hello"})).json()
    assert weather["route"] == "weather_complete"
    assert weather["results"] == [
        {"kind": "forecast", "text": "sunny", "query": "weather in Rome?"}
    ]
    assert weather["degraded"] == []  # the collector step never ran
    assert other["route"] == "collector_complete"
    assert other["intent"] == "greeting"


async def test_extensions_load_from_settings(embedded) -> None:
    settings = graph_settings(extensions="tests.graph.extension_example:add_weather")
    async with graph_app(embedded, settings) as (client, _app):
        body = (await client.post("/dispatch", json={"query": "what's the weather"})).json()
    assert body["route"] == "weather_complete"
