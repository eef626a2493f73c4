"""What a source is: something the Tracker can read raw items from, batch by batch."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from conclave.settings import CollectorSettings


class SourceError(Exception):
    """A source could not be read (unreachable, timed out, garbage); the message is for users,
    ``code`` goes into the expedition's recorded error."""

    code = "EXPEDITION_FAILED"


@dataclass(frozen=True)
class SourceContext:
    """What sources may use: settings (file roots, edge address), the run's correlation id and
    the user it runs for."""

    settings: CollectorSettings
    correlation_id: str | None = None
    acting_user: str | None = None
    """The user a source that reads another Conclave service acts for (the expedition's
    requester); ``None``: the collector reads as itself (the bridge, internal runs)."""


class Source(Protocol):
    """A kind of source, named in ``parameters.sources[].type``."""

    name: str

    def validate(self, spec: Mapping[str, Any], settings: CollectorSettings) -> None:
        """Raise ``ValueError`` with a clear message when ``spec`` cannot work."""
        ...

    def fetch(self, spec: Mapping[str, Any], context: SourceContext) -> AsyncIterator[list[Any]]:
        """Yield raw items in batches; raise :class:`SourceError` on failure."""
        ...


def label(spec: Mapping[str, Any]) -> str:
    """A short human name of a source spec, stored with each record it produced."""
    where = spec.get("path") or spec.get("url") or spec.get("name") or ""
    return f"{spec.get('type')}:{where}"[:256]
