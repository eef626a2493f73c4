"""All configuration of Conclave. This package is the only code that reads the environment.

Each service has one settings class; they share :class:`CommonSettings`. Settings are read once at
startup (``XSettings()``) and handed down; nothing else looks at ``os.environ``.
"""

from conclave.settings.collector import CollectorSettings
from conclave.settings.common import CommonSettings
from conclave.settings.console import ConsoleSettings
from conclave.settings.edge import EdgeSettings
from conclave.settings.edge_client import EdgeClientSettings
from conclave.settings.gateway import GatewaySettings
from conclave.settings.graph import GraphSettings

__all__ = [
    "CollectorSettings",
    "CommonSettings",
    "ConsoleSettings",
    "EdgeClientSettings",
    "EdgeSettings",
    "GatewaySettings",
    "GraphSettings",
]
