"""What every semantic memory is: the interface, its records, point ids and embedded text.

Both implementations keep one store for all record collections: each point's payload carries its
``collection`` (a keyword field with a tenant index) beside ``record_key`` and ``content_hash``,
and every read filters on it. Qdrant Edge has no collections, and Qdrant recommends one collection
with a tenant field over many small collections on a server too, so both layouts are the same: the
same point ids, payloads, filters and scores.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conclave.collector.records import OPERATORS_ONLY
from conclave.platform.inputs import escape_text

log = logging.getLogger(__name__)

_POINT_NAMESPACE = uuid.UUID("5b0c6c52-4f3e-4b8e-9a77-c0111ec7a0e5")
_NAMESPACE_BYTES = _POINT_NAMESPACE.bytes
_MAX_TEXT_CHARS = 8000

COLLECTION_FIELD = "collection"
"""The payload field naming a point's record collection (keyword, tenant index)."""
ACCESS_FIELD = "access"
"""The payload field saying who may find a point besides operators (keyword index): ``public``
(everyone who may read its collection), ``user:<id>`` (that user) or ``operators``. A point
without it (written before owners existed) is found by operators only: a reader's filter names
the values they may see, so whatever is unmarked fails closed."""
PUBLIC_ACCESS = "public"
OPERATORS_ACCESS = "operators"


def access_of(owner: str | None) -> str:
    """The ``access`` of a record's point from the record's ``owner`` (see
    :attr:`~conclave.collector.records.CollectedRecord.owner`)."""
    if owner is None:
        return PUBLIC_ACCESS
    if owner == OPERATORS_ONLY:
        return OPERATORS_ACCESS
    return f"user:{owner}"


def reader_access(reader: str) -> list[str]:
    """The ``access`` values of the points user ``reader`` may find."""
    return [PUBLIC_ACCESS, access_of(reader)]


def point_id(collection: str, key: str) -> str:
    """The stable point id of a record: writing its vector again replaces the point.

    ``str(uuid.uuid5(namespace, collection + NUL + key))``, computed without building the
    ``UUID`` object, which cost two thirds of the time (one id per point written)."""
    name = f"{collection}\x00{key}".encode()
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name, usedforsecurity=False).digest())
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest[:16].hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def point_payload(
    collection: str, key: str, content_hash: str, owner: str | None = None
) -> dict[str, str]:
    """The payload of a record's point (the same on every implementation)."""
    return {
        COLLECTION_FIELD: collection,
        "record_key": key,
        "content_hash": content_hash,
        ACCESS_FIELD: access_of(owner),
    }


class _Enough(Exception):
    """The text is long enough: the rest of the record is not walked."""


def embedding_text(data: Any) -> str:
    """The text embedded for a record: its scalar leaves as ``path: value`` lines, up to 8000
    characters. The walk stops there, so a huge record costs no more than a long one."""
    lines: list[str] = []
    size = 0

    def walk(value: Any, path: str) -> None:
        nonlocal size
        if isinstance(value, dict):
            for name, child in value.items():
                walk(child, f"{path}.{name}" if path else str(name))
        elif isinstance(value, list):
            for child in value:
                walk(child, path)
        elif value is not None:
            line = f"{path}: {value}" if path else str(value)
            lines.append(line)
            size += len(line) + 1
            if size > _MAX_TEXT_CHARS:
                raise _Enough

    with contextlib.suppress(_Enough, RecursionError):
        walk(data, "")
    # A record with no scalar at all ({} or lists of nothing) has no text: its point is the
    # zero vector, which matches nothing (serialising it instead would be unbounded work).
    return "\n".join(lines)[:_MAX_TEXT_CHARS]


def text_of_document(collection: str, key: str, document: str) -> str:
    """The embedded text of a record kept as the JSON text ``document`` (how the structured
    store keeps its data), storable and encodable by any embedder."""
    try:
        data = json.loads(document)
    except (ValueError, RecursionError):
        # Only a store written by hand can hold this (PostgreSQL checks JSON on the way in, the
        # service on every write): the record gets the vector of no text, which matches
        # nothing, instead of failing its batch, and every batch after it, every time.
        log.warning("record %r of %r: its stored data is not JSON", key, collection)
        return ""
    # A record stored before text was checked may hold a lone surrogate: an embedder encodes
    # its text, and one such record would fail its whole batch, every time.
    return escape_text(embedding_text(data))


@dataclass(frozen=True)
class StoredDocument:
    """A record as the structured store keeps it: its data as JSON text."""

    collection: str
    key: str
    content_hash: str
    document: str
    owner: str | None = None


@dataclass(frozen=True)
class VectorRecord:
    """What semantic memory holds about one record."""

    collection: str
    key: str
    content_hash: str
    text: str
    owner: str | None = None


@dataclass(frozen=True)
class StoredPoint:
    """A point read back from semantic memory."""

    key: str
    content_hash: str
    access: str | None = PUBLIC_ACCESS
    """Its ``access`` value; ``None`` for a point written before points carried one."""

    @classmethod
    def of_payload(cls, payload: dict[str, Any]) -> StoredPoint:
        """The point a payload describes."""
        access = payload.get(ACCESS_FIELD)
        return cls(
            str(payload["record_key"]),
            str(payload.get("content_hash", "")),
            access if isinstance(access, str) else None,
        )


class SemanticMemoryUnavailable(Exception):
    """Semantic memory does not answer (server down, shard held by another process, its process
    gone). Records keep their vectors pending; the indexer retries."""


class SemanticMemory(ABC):
    """The collector's semantic memory: points by (collection, record key), searched by text.

    Implementations embed the texts themselves (the embedded one in its own process). Every method
    raises :class:`SemanticMemoryUnavailable` when the store cannot be reached. A write returns
    once it is durable: the indexer clears a record's pending flag only after that.
    """

    embedder_name: str
    generation: int = 0
    """Changes whenever the store behind may have been replaced (a new semantic-memory process,
    a server collection made again): the indexer then asks :meth:`needs_reindex` again."""

    @abstractmethod
    async def open(self) -> None:
        """Connect (or start the store's process); an unreachable store is not an error here."""

    @abstractmethod
    async def close(self) -> None:
        """Release the store."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise :class:`SemanticMemoryUnavailable` when semantic memory does not answer."""

    @abstractmethod
    async def needs_reindex(self) -> bool:
        """Whether the store was created empty (first start, or moved from an older layout) and
        has not been refilled from the structured store yet (see :meth:`reindex_started`)."""

    @abstractmethod
    async def reindex_started(self) -> None:
        """Every record was flagged pending again: the store stops asking for a re-index."""

    @abstractmethod
    async def upsert(self, items: Sequence[VectorRecord]) -> None:
        """Embed and write the points of ``items`` (any collections); durable on return."""

    async def upsert_documents(self, items: Sequence[StoredDocument]) -> None:
        """Write the points of records given as stored (their data as JSON text): what the
        indexer hands over. Decoding and walking the records is CPU work off the event loop: on
        a worker thread here, in its own process for the embedded memory."""
        if items:
            await self.upsert(await asyncio.to_thread(_vector_records, items))

    @abstractmethod
    async def delete(self, collection: str, keys: Sequence[str]) -> None:
        """Remove the points of ``keys``; durable on return."""

    @abstractmethod
    async def count(self, collection: str, reader: str | None = None) -> int:
        """Points of ``collection`` (0 for a collection never written); with ``reader``, only
        those that user may find (see :meth:`search`)."""

    @abstractmethod
    async def scan(self, collection: str) -> list[StoredPoint]:
        """Every point of ``collection`` with its record key and content hash."""

    @abstractmethod
    async def search(
        self, collection: str, query: str, limit: int, reader: str | None = None
    ) -> list[tuple[str, float]]:
        """``(record_key, score)`` of the points of ``collection`` nearest to ``query``, best
        first (cosine similarity). With ``reader`` (a user id), only points that have no owner
        or are that user's: a user's ``limit`` is never spent on records they may not read."""


def _vector_records(items: Sequence[StoredDocument]) -> list[VectorRecord]:
    return [
        VectorRecord(
            i.collection,
            i.key,
            i.content_hash,
            text_of_document(i.collection, i.key, i.document),
            i.owner,
        )
        for i in items
    ]
