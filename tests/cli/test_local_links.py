"""`conclave up` points every service-to-service URL not set explicitly at the ports in use."""

from __future__ import annotations

import pytest

from conclave.cli.local_links import follow_ports
from conclave.cli.services import ServiceName
from conclave.settings import CollectorSettings, EdgeSettings, GatewaySettings, GraphSettings


def settings(**gateway: str) -> dict[ServiceName, object]:
    return {
        ServiceName.gateway: GatewaySettings(GATEWAY_PORT=9020, **gateway),
        ServiceName.collector: CollectorSettings(COLLECTOR_API_PORT=9008),
        ServiceName.graph: GraphSettings(GRAPH_PORT=9004),
        ServiceName.edge: EdgeSettings(EDGE_PORT=9050),
    }


@pytest.mark.parametrize(
    ("bind", "host"),
    [("127.0.0.1", "127.0.0.1"), ("0.0.0.0", "127.0.0.1"), ("::", "[::1]"), ("::1", "[::1]"),
     ("localhost", "localhost")],
)  # fmt: skip
def test_every_link_follows_the_ports(bind: str, host: str) -> None:
    linked = follow_ports(settings(), bind)
    gateway = linked[ServiceName.gateway]
    assert gateway.edge_url == f"http://{host}:9050"
    assert gateway.collector_url == f"http://{host}:9008"
    assert gateway.graph_url == f"http://{host}:9004"
    assert linked[ServiceName.graph].collector_url == f"http://{host}:9008"
    assert linked[ServiceName.collector].edge_api_base == f"http://{host}:9050"


def test_an_explicit_url_wins() -> None:
    linked = follow_ports(settings(GATEWAY_EDGE_URL="http://edge.internal:8050"), "127.0.0.1")
    assert linked[ServiceName.gateway].edge_url == "http://edge.internal:8050"
    assert linked[ServiceName.gateway].collector_url == "http://127.0.0.1:9008"
