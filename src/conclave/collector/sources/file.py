"""The ``file`` source: CSV, JSON Lines or JSON from the inbox or another allowed root.

Which paths it may read, and how they are opened, is :mod:`file_access`'s policy.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import PurePosixPath
from typing import Any

from conclave.collector.sources.base import SourceContext, SourceError
from conclave.collector.sources.file_access import FileRoots
from conclave.platform.jsontext import json_decoder
from conclave.settings import CollectorSettings

_FORMATS = ("csv", "jsonl", "json")
_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json"}
_loads = json_decoder()


def _format(spec: Mapping[str, Any]) -> str:
    declared = spec.get("format")
    if declared:
        return str(declared)
    return _SUFFIXES.get(PurePosixPath(str(spec.get("path", ""))).suffix.lower(), "")


def file_roots(settings: CollectorSettings) -> FileRoots:
    """The folders the ``file`` source may read under ``settings`` (the inbox first)."""
    return FileRoots(settings.resolved_file_roots())


class FileSource:
    """Reads a local file; rows come in batches so a large file never sits in memory whole
    (except JSON documents, which must be parsed at once)."""

    name = "file"

    def __init__(self, batch_size: int = 1000) -> None:
        self._batch = batch_size

    def validate(self, spec: Mapping[str, Any], settings: CollectorSettings) -> None:
        """Check the path (by the policy, without reading the disk) and the format."""
        if "path" not in spec:
            raise ValueError("a file source needs 'path'")
        file_roots(settings).locate(spec["path"])
        if _format(spec) not in _FORMATS:
            raise ValueError(f"file 'format' must be one of {', '.join(_FORMATS)}")

    async def fetch(
        self, spec: Mapping[str, Any], context: SourceContext
    ) -> AsyncIterator[list[Any]]:
        """Yield the file's items in batches."""
        settings = context.settings
        kind = _format(spec)
        roots = file_roots(settings)
        handle = await asyncio.to_thread(roots.open, spec.get("path"), settings.file_max_bytes)
        try:
            rows = self._rows(handle, kind, spec)
            while True:
                batch = await asyncio.to_thread(self._take, rows)
                if not batch:
                    return
                yield batch
        finally:
            handle.close()

    def _take(self, rows: Iterator[Any]) -> list[Any]:
        batch: list[Any] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= self._batch:
                break
        return batch

    def _rows(self, handle: io.TextIOBase, kind: str, spec: Mapping[str, Any]) -> Iterator[Any]:
        try:
            if kind == "csv":
                delimiter = str(spec.get("delimiter", ","))[:1] or ","
                yield from csv.DictReader(handle, delimiter=delimiter)
            elif kind == "jsonl":
                for number, line in enumerate(handle, start=1):
                    if line.strip():
                        yield self._json(line, f"line {number}")
            else:
                document = self._json(handle.read(), "document")
                pointer = spec.get("records_path")
                for part in str(pointer).split(".") if pointer else []:
                    document = document.get(part) if isinstance(document, dict) else None
                if not isinstance(document, list):
                    raise SourceError("the JSON document (at records_path) is not an array")
                yield from document
        except UnicodeDecodeError as exc:
            raise SourceError("the file is not UTF-8 text") from exc
        except csv.Error as exc:
            raise SourceError(f"malformed CSV: {exc}") from exc

    @staticmethod
    def _json(text: str, where: str) -> Any:
        try:
            return _loads(text)
        except json.JSONDecodeError as exc:
            raise SourceError(f"malformed JSON at {where}: {exc.msg}") from exc
        except (ValueError, RecursionError) as exc:  # a 5,000-digit number, nesting too deep
            raise SourceError(f"unreadable JSON at {where}: {type(exc).__name__}") from exc
