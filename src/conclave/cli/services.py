"""The four services by name: settings class and app factory (the CLI is the composition root)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fastapi import FastAPI

from conclave.collector.app import create_app as create_collector_app
from conclave.edge.app import create_app as create_edge_app
from conclave.gateway.app import create_app as create_gateway_app
from conclave.graph.app import create_app as create_graph_app
from conclave.settings import (
    CollectorSettings,
    CommonSettings,
    EdgeSettings,
    GatewaySettings,
    GraphSettings,
)


class ServiceName(StrEnum):
    """Services ``conclave serve`` can run."""

    gateway = "gateway"
    collector = "collector"
    graph = "graph"
    edge = "edge"


@dataclass(frozen=True)
class ServiceSpec:
    """How to configure and build one service."""

    settings: type[CommonSettings]
    create_app: Callable[..., FastAPI]
    description: str


SERVICES: dict[ServiceName, ServiceSpec] = {
    ServiceName.gateway: ServiceSpec(GatewaySettings, create_gateway_app, "tool gateway"),
    ServiceName.collector: ServiceSpec(CollectorSettings, create_collector_app, "expeditions"),
    ServiceName.graph: ServiceSpec(GraphSettings, create_graph_app, "graph dispatch"),
    ServiceName.edge: ServiceSpec(EdgeSettings, create_edge_app, "edge media intake"),
}


def load_settings(name: ServiceName) -> Any:
    """Read the service's settings from the environment."""
    return SERVICES[name].settings()
