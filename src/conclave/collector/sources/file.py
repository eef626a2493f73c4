"""The ``file`` source: CSV, JSON Lines or JSON on a local path inside the allowed roots."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

from conclave.collector.sources.base import SourceContext, SourceError
from conclave.settings import CollectorSettings

_FORMATS = ("csv", "jsonl", "json")
_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json"}


def _format(spec: Mapping[str, Any]) -> str:
    declared = spec.get("format")
    if declared:
        return str(declared)
    return _SUFFIXES.get(Path(str(spec.get("path", ""))).suffix.lower(), "")


def _resolve(spec: Mapping[str, Any], settings: CollectorSettings) -> Path:
    path = Path(str(spec["path"])).resolve()
    # The service reads files on behalf of API callers: never outside the configured folders.
    if not any(path.is_relative_to(root) for root in settings.resolved_file_roots()):
        raise ValueError(
            f"path {spec['path']!r} is outside the allowed roots (COLLECTOR_FILE_ROOTS)"
        )
    return path


class FileSource:
    """Reads a local file; rows come in batches so a large file never sits in memory whole
    (except JSON documents, which must be parsed at once)."""

    name = "file"

    def __init__(self, batch_size: int = 1000) -> None:
        self._batch = batch_size

    def validate(self, spec: Mapping[str, Any], settings: CollectorSettings) -> None:
        """Check the path (inside the roots) and the format."""
        if not isinstance(spec.get("path"), str) or not spec["path"]:
            raise ValueError("a file source needs 'path'")
        _resolve(spec, settings)
        if _format(spec) not in _FORMATS:
            raise ValueError(f"file 'format' must be one of {', '.join(_FORMATS)}")

    async def fetch(
        self, spec: Mapping[str, Any], context: SourceContext
    ) -> AsyncIterator[list[Any]]:
        """Yield the file's items in batches."""
        path = _resolve(spec, context.settings)
        kind = _format(spec)
        try:
            handle = await asyncio.to_thread(path.open, "r", encoding="utf-8", newline="")
        except OSError as exc:
            raise SourceError(f"cannot open {spec['path']}: {exc.strerror or exc}") from exc
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
            raise SourceError(f"{spec['path']} is not UTF-8 text") from exc
        except csv.Error as exc:
            raise SourceError(f"{spec['path']}: malformed CSV: {exc}") from exc

    @staticmethod
    def _json(text: str, where: str) -> Any:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise SourceError(f"malformed JSON at {where}: {exc.msg}") from exc
