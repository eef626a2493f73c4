"""The registry of expedition types and sources: built-ins plus entry-point plug-ins."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from conclave.collector.expedition_types import BUILTIN_TYPES, ExpeditionType
from conclave.collector.models import COLLECTION_PATTERN, ExpeditionCreate
from conclave.collector.sources.base import Source
from conclave.collector.sources.evidence import EvidenceSource
from conclave.collector.sources.file import FileSource
from conclave.collector.sources.http_json import HttpJsonSource
from conclave.platform.errors import Unprocessable
from conclave.platform.problem_types import ProblemCode
from conclave.settings import CollectorSettings

log = logging.getLogger(__name__)

TYPES_GROUP = "conclave.expeditions"
SOURCES_GROUP = "conclave.sources"
_COLLECTION = re.compile(COLLECTION_PATTERN)


# Where plug-ins are found: the entry points of a group (the installed distributions' by default).
PluginFinder = Callable[[str], Iterable[EntryPoint]]


def installed_plugins(group: str) -> Iterable[EntryPoint]:
    """The entry points of ``group`` declared by the installed distributions."""
    return entry_points(group=group)


_PLUGIN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _plugins(group: str, find: PluginFinder) -> Iterable[Any]:
    for entry in find(group):
        try:
            loaded = entry.load()
            # An entry point may name the object, its class (whose ``name`` is a class
            # attribute, so a class is always built), or a factory that builds it.
            built = isinstance(loaded, type) or (callable(loaded) and not hasattr(loaded, "name"))
            plugin = loaded() if built else loaded
            if not isinstance(plugin.name, str) or not _PLUGIN_NAME.fullmatch(plugin.name):
                raise TypeError(f"a plug-in's name must match {_PLUGIN_NAME.pattern}")
        except Exception:
            # A broken plug-in is left out: it must not stop the collector and the others.
            log.exception("cannot load plug-in", extra={"group": group, "entry_point": entry.name})
            continue
        yield plugin


def _problem_code(error: BaseException) -> str:
    """The code a source gave its refusal (``FILE_REFUSED``, ...), even when the expedition type
    wrapped it with the source's position; ``INVALID_PARAMETERS`` otherwise."""
    cause: BaseException | None = error
    while cause is not None:
        code = getattr(cause, "code", None)
        if isinstance(code, str):
            return code
        cause = cause.__cause__
    return ProblemCode.INVALID_PARAMETERS


class ExpeditionRegistry:
    """Known expedition types and sources, by name."""

    def __init__(self, types: Iterable[ExpeditionType], sources: Iterable[Source]) -> None:
        self.types = {t.name: t for t in types}
        self.sources = {s.name: s for s in sources}

    @classmethod
    def load(
        cls, settings: CollectorSettings, *, find_plugins: PluginFinder = installed_plugins
    ) -> ExpeditionRegistry:
        """Built-ins, plus plug-ins from the ``conclave.expeditions`` and ``conclave.sources``
        entry points when settings allow (a plug-in of a built-in's name replaces it)."""
        types: list[ExpeditionType] = list(BUILTIN_TYPES)
        sources: list[Source] = [FileSource(), HttpJsonSource(), EvidenceSource()]
        if settings.load_entry_points:
            types += list(_plugins(TYPES_GROUP, find_plugins))
            sources += list(_plugins(SOURCES_GROUP, find_plugins))
        return cls(types, sources)

    def validate(self, request: ExpeditionCreate, settings: CollectorSettings) -> ExpeditionType:
        """The request's type, after checking the request against it (422 with the reason)."""
        kind = self.types.get(request.expedition_type)
        if kind is None:
            known = sorted(self.types)
            raise Unprocessable(
                f"Unknown expedition_type {request.expedition_type!r}; known types: "
                f"{', '.join(known)}.",
                code=ProblemCode.UNKNOWN_EXPEDITION_TYPE,
                errors=[
                    {
                        "field": "expedition_type",
                        "message": f"must be one of: {', '.join(known)}",
                        "type": "unknown_expedition_type",
                    }
                ],
                extra={"known_types": known},
            )
        for index, name in enumerate(request.target_collections):
            if not _COLLECTION.match(name):
                raise Unprocessable(
                    f"target_collections[{index}] is not a valid collection name.",
                    errors=[
                        {
                            "field": f"target_collections.{index}",
                            "message": "1-128 characters of letters, digits, '_', '.', '-'",
                            "type": "invalid_collection",
                        }
                    ],
                )
        try:
            kind.validate(request.parameters, self.sources, settings)
        except ValueError as exc:
            raise Unprocessable(
                str(exc),
                code=_problem_code(exc),
                errors=[{"field": "parameters", "message": str(exc), "type": "invalid"}],
            ) from exc
        return kind
