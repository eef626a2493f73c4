"""Under ``conclave up`` the four services call each other on the ports they listen on.

Each service's settings default the addresses of the others to their default ports (8008, 8004,
8050): right for one service per host, wrong when ``up`` runs with ``GATEWAY_PORT``,
``EDGE_PORT``, ... set, where the gateway would then ask nobody (or someone else) on 8050. An
address given explicitly (``GATEWAY_EDGE_URL``, ...) is left alone: it may name a service this
process does not run.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from conclave.cli.services import ServiceName

# (service, its settings field holding another service's base URL, the service it names)
LINKS: tuple[tuple[ServiceName, str, ServiceName], ...] = (
    (ServiceName.gateway, "edge_url", ServiceName.edge),
    (ServiceName.gateway, "collector_url", ServiceName.collector),
    (ServiceName.gateway, "graph_url", ServiceName.graph),
    (ServiceName.graph, "collector_url", ServiceName.collector),
    (ServiceName.collector, "edge_api_base", ServiceName.edge),
    (ServiceName.console, "gateway_url", ServiceName.gateway),
    (ServiceName.console, "collector_url", ServiceName.collector),
    (ServiceName.console, "graph_url", ServiceName.graph),
    (ServiceName.console, "edge_url", ServiceName.edge),
)


def connect_host(bind: str) -> str:
    """The address a service of this process reaches another one at, for a bind address: the
    wildcard addresses are not connectable everywhere, so they become loopback."""
    try:
        address = ipaddress.ip_address(bind)
    except ValueError:
        return bind  # a name, such as localhost
    if address.is_unspecified:
        return "127.0.0.1" if address.version == 4 else "[::1]"
    return f"[{address}]" if address.version == 6 else str(address)


def follow_ports(settings: dict[ServiceName, Any], bind: str) -> dict[ServiceName, Any]:
    """``settings`` with every service-to-service URL that was not set explicitly pointing at
    the port its service listens on in this process."""
    host = connect_host(bind)
    updates: dict[ServiceName, dict[str, str]] = {name: {} for name in settings}
    for owner, field, target in LINKS:
        explicit = owner in settings and field in settings[owner].model_fields_set
        if owner in settings and target in settings and not explicit:
            updates[owner][field] = f"http://{host}:{settings[target].port}"
    return {name: value.model_copy(update=updates[name]) for name, value in settings.items()}
