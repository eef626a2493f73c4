"""Semantic memory: one point per record, searched by text (docs/collector.md).

Embedded (the default): a Qdrant Edge shard under the data folder, in a process of its own
(:mod:`.edge`). Production: a Qdrant server at ``CONCLAVE_SEMANTIC_MEMORY_URL`` (:mod:`.server`).
The interface and its records are in :mod:`.base`, the choice between the two in :mod:`.opening`.
This package imports nothing itself: the semantic-memory process imports only what it runs.
"""
