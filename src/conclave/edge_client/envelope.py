"""The client envelope of spec 002: what a device queues before it is turned into an upload."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from conclave.edge_client.errors import InvalidEnvelope
from conclave.platform.inputs import find_unsafe
from conclave.platform.media_types import media_type_names

# The server refuses other correlation ids with a 422; refusing them here keeps a bad item out
# of the outbox instead of failing it at sync time.
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:/@+=-]{1,128}\Z")


def utc_timestamp(moment: datetime | None = None) -> str:
    """RFC 3339 UTC with a ``Z`` suffix, the form of ``created_utc``."""
    moment = moment or datetime.now(UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Envelope:
    """One queued upload: a local file of a media type with its metadata.

    ``source_uri`` is a ``file://`` URI or a plain path of a local file; the outbox stores the
    reference, not a copy, so the file must stay in place until the item is ``SENT``.
    """

    source_type: str
    source_uri: str
    metadata: dict[str, Any] = field(default_factory=dict)
    correlation_id: str | None = None
    created_utc: str = field(default_factory=utc_timestamp)

    @classmethod
    def for_file(
        cls,
        source_type: str,
        path: str | os.PathLike[str],
        metadata: dict[str, Any] | None = None,
        correlation_id: str | None = None,
    ) -> Envelope:
        """An envelope for a local file, checked (:meth:`validate`) and with an absolute URI."""
        envelope = cls(
            source_type=source_type,
            source_uri=Path(path).expanduser().absolute().as_uri(),
            metadata=dict(metadata or {}),
            correlation_id=correlation_id,
        )
        envelope.validate()
        return envelope

    @property
    def path(self) -> Path:
        """The local file the envelope points at."""
        return local_path(self.source_uri)

    def validate(self) -> None:
        """Raise :class:`InvalidEnvelope` unless the type, file, metadata and ids are usable."""
        check_source_type(self.source_type)
        check_metadata(self.metadata)
        if self.correlation_id is not None and not _SAFE_ID.match(self.correlation_id):
            raise InvalidEnvelope(
                "correlation_id must be 1-128 characters of A-Z a-z 0-9 . _ : / @ + = -."
            )
        check_readable_file(self.path)

    def to_dict(self) -> dict[str, Any]:
        """The envelope as the spec's JSON object."""
        return {
            "source_type": self.source_type,
            "source_uri": self.source_uri,
            "metadata": self.metadata,
            "correlation_id": self.correlation_id,
            "created_utc": self.created_utc,
        }


def local_path(source_uri: str) -> Path:
    """The path of a ``file://`` URI or a plain path; other schemes are refused."""
    if source_uri.startswith("file:"):
        parsed = urlparse(source_uri)
        if parsed.netloc not in ("", "localhost"):
            raise InvalidEnvelope(f"{source_uri!r} names a file on another host.")
        return Path(url2pathname(parsed.path))
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+://", source_uri):
        raise InvalidEnvelope(f"{source_uri!r} is not a local file; only file:// is supported.")
    return Path(source_uri)


def __getattr__(name: str) -> object:
    # ``SOURCE_TYPES`` was this module's fixed tuple of the built-in types; it is now read from
    # their one home on each access, so it names the plug-ins' types too.
    if name == "SOURCE_TYPES":
        return media_type_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_source_type(source_type: str) -> None:
    """Raise :class:`InvalidEnvelope` unless ``source_type`` is a registered media type."""
    names = media_type_names()
    if source_type not in names:
        raise InvalidEnvelope(
            f"Unknown source type {source_type!r}; expected one of: {', '.join(names)}."
        )


def check_readable_file(path: Path) -> None:
    """Raise :class:`InvalidEnvelope` unless ``path`` is a non-empty regular file we can read."""
    if not path.exists():
        raise InvalidEnvelope(f"{path} does not exist.")
    if path.is_dir():
        raise InvalidEnvelope(f"{path} is a directory; queue its files one by one.")
    if not path.is_file():
        raise InvalidEnvelope(f"{path} is not a regular file.")
    try:
        # Opening is the only reliable test (ACLs, root, network file systems fool os.access).
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise InvalidEnvelope(f"{path} cannot be read: {exc.strerror or exc}.") from exc
    if path.stat().st_size == 0:
        raise InvalidEnvelope(f"{path} is empty; the server refuses empty files.")


def check_metadata(metadata: Any) -> None:
    """Raise :class:`InvalidEnvelope` unless ``metadata`` is a JSON object the server can read."""
    if not isinstance(metadata, dict):
        raise InvalidEnvelope(
            f"metadata must be a JSON object (key-value pairs), not {_json_kind(metadata)}."
        )
    try:
        json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidEnvelope(f"metadata is not valid JSON: {exc}.") from exc
    if not all(isinstance(key, str) for key in metadata):
        raise InvalidEnvelope("metadata keys must be strings.")
    # What the server refuses (422 UNSAFE_INPUT) is refused here, at enqueue: a queued upload
    # that can only ever be refused would wait in the outbox for nothing.
    finding = find_unsafe(metadata, ("metadata",))
    if finding is not None:
        raise InvalidEnvelope(f"{finding.field}: {finding.message}")


def parse_metadata(raw: str | None) -> dict[str, Any]:
    """Parse metadata given as JSON text (the CLI's ``--metadata``); must be an object."""
    if raw is None or raw.strip() == "":
        return {}
    try:
        value = json.loads(raw, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise InvalidEnvelope(f"metadata is not valid JSON: {exc}.") from exc
    check_metadata(value)
    return value  # type: ignore[no-any-return]


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return "a number"
    return type(value).__name__
