"""Which semantic memory a collector process uses, from its settings."""

from __future__ import annotations

from qdrant_client import AsyncQdrantClient

from conclave.collector.semantic.base import SemanticMemory
from conclave.collector.semantic.edge import EdgeMemory
from conclave.collector.semantic.server import ServerMemory
from conclave.platform.embedding import load_embedder
from conclave.settings import CollectorSettings


def open_semantic_memory(settings: CollectorSettings) -> SemanticMemory:
    """The server at ``CONCLAVE_SEMANTIC_MEMORY_URL``, or the embedded shard under the data
    folder (call :meth:`SemanticMemory.open` before use)."""
    if settings.semantic_memory_url:
        api_key = settings.semantic_memory_api_key.get_secret_value() or None
        client = AsyncQdrantClient(url=settings.semantic_memory_url, api_key=api_key, timeout=10)
        embedder = load_embedder(settings.embedder, settings.embedding_dimensions)
        return ServerMemory(client, embedder, settings.semantic_collection_prefix)
    return EdgeMemory(
        settings.resolved_semantic_memory_path(),
        settings.embedder,
        settings.embedding_dimensions,
        log_level=settings.log_level,
    )
