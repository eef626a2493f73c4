"""The event bus: in-process for embedded mode, Redis Streams for production."""

from conclave.platform.bus.base import Event, EventBus, Handler
from conclave.platform.bus.factory import create_bus

__all__ = ["Event", "EventBus", "Handler", "create_bus"]
