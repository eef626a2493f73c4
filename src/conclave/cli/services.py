"""The services by name: settings class and app factory (the CLI is the composition root)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fastapi import FastAPI

from conclave.settings import (
    CollectorSettings,
    CommonSettings,
    ConsoleSettings,
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
    console = "console"


@dataclass(frozen=True)
class ServiceSpec:
    """How to configure and build one service."""

    settings: type[CommonSettings]
    app_module: str
    description: str
    uses_platform: bool = True
    """Whether the app runs on a store and a bus (shared under ``conclave up``); the console
    has neither, only the other services' HTTP APIs."""

    def create_app(self, settings: Any, **kwargs: Any) -> FastAPI:
        """Build the service's app.

        The service package is imported here, not when the CLI starts: every command (``conclave
        edge ...`` on a small device included) would otherwise pay for importing all four
        services and their parsing libraries.
        """
        factory = importlib.import_module(self.app_module).create_app
        return factory(settings, **kwargs)  # type: ignore[no-any-return]


SERVICES: dict[ServiceName, ServiceSpec] = {
    ServiceName.gateway: ServiceSpec(GatewaySettings, "conclave.gateway.app", "tool gateway"),
    ServiceName.collector: ServiceSpec(CollectorSettings, "conclave.collector.app", "expeditions"),
    ServiceName.graph: ServiceSpec(GraphSettings, "conclave.graph.app", "graph dispatch"),
    ServiceName.edge: ServiceSpec(EdgeSettings, "conclave.edge.app", "edge media intake"),
    ServiceName.console: ServiceSpec(
        ConsoleSettings, "conclave.console.app", "operator console (browser)", uses_platform=False
    ),
}


def load_settings(name: ServiceName) -> Any:
    """Read the service's settings from the environment."""
    return SERVICES[name].settings()
