"""The semantic-memory process: owns the Qdrant Edge shard and the embedder, serves the collector.

Started by :class:`~conclave.collector.semantic.edge.EdgeMemory` as
``python -m conclave.collector.semantic.edge_process``; requests arrive on stdin and answers leave
on the original stdout, one at a time, in order. Why a process of its own (docs/collector.md,
"Semantic memory"): Qdrant Edge holds the GIL for the whole of every call and the embedder is CPU
work, so in the service's process each batch would stall its event loop; here they run on the
other core. The process ends when its stdin closes (the collector stopped or died), after
flushing the shard; a kill -9 loses nothing acknowledged (each write is flushed before its answer).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from conclave.collector.semantic.base import text_of_document
from conclave.collector.semantic.edge_shard import EdgeStore, ShardHeld
from conclave.collector.semantic.frames import encode, read_frame
from conclave.platform.embedding import Embedder, load_embedder

log = logging.getLogger("conclave.collector.semantic")


class _Server:
    def __init__(self, store: EdgeStore, embedder: Embedder) -> None:
        self._store = store
        self._embedder = embedder

    def _vectors(self, texts: list[str]) -> np.ndarray:
        # The built-in embedder answers an array directly: its lists of Python floats cost more
        # than the embedding itself. Plug-ins answer lists (the Embedder protocol).
        as_matrix = getattr(self._embedder, "embed_matrix", None)
        vectors = as_matrix(texts) if as_matrix is not None else self._embedder.embed(texts)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self._embedder.dimensions)

    def upsert(self, items: list[tuple[str, str, str, str, str | None]]) -> None:
        vectors = self._vectors([text for _, _, _, text, _ in items])
        self._store.upsert([(c, k, h, owner) for c, k, h, _, owner in items], vectors)

    def upsert_documents(self, items: list[tuple[str, str, str, str, str | None]]) -> None:
        self.upsert(
            [(c, k, h, text_of_document(c, k, document), o) for c, k, h, document, o in items]
        )

    def search(
        self, collection: str, query: str, limit: int, reader: str | None
    ) -> list[tuple[str, float]]:
        [vector] = self._vectors([query])
        if not np.any(vector):  # no word in the query: every point would tie at score 0
            return []
        return self._store.search(collection, vector, limit, reader)

    def operations(self) -> dict[str, Callable[..., Any]]:
        return {
            "ping": lambda: None,
            "needs_reindex": self._store.needs_reindex,
            "reindex_started": self._store.reindex_started,
            "upsert": self.upsert,
            "upsert_documents": self.upsert_documents,
            "delete": self._store.delete,
            "count": self._store.count,
            "scan": self._store.scan,
            "search": self.search,
        }


def _answers() -> BinaryIO:
    """The channel to the collector, kept away from anything that prints: fd 1 is pointed at
    stderr so a library writing to stdout cannot corrupt a frame."""
    channel = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def _send(channel: BinaryIO, message: Any) -> None:
    channel.write(encode(message))


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """Open the shard named in the first request, then answer requests until stdin closes."""
    setup = read_frame(requests)
    sys.path[:] = setup["import_path"]
    logging.basicConfig(level=setup["log_level"], format="%(levelname)s %(name)s: %(message)s")
    try:
        embedder = load_embedder(setup["embedder"], setup["dimensions"])
        store = EdgeStore.open(Path(setup["folder"]), embedder.dimensions)
    except ShardHeld as exc:
        _send(answers, ("held", str(exc)))
        return
    except Exception as exc:
        _send(answers, ("error", f"{type(exc).__name__}: {exc}"))
        return
    _send(answers, ("ready", embedder.name))
    operations = _Server(store, embedder).operations()
    try:
        while True:
            try:
                name, arguments = read_frame(requests)
            except EOFError:
                return
            try:
                _send(answers, ("ok", operations[name](*arguments)))
            except Exception as exc:
                log.warning("semantic memory %s failed", name, exc_info=True)
                _send(answers, ("error", f"{type(exc).__name__}: {exc}"))
    finally:
        store.close()


def main() -> None:
    """Entry point of the process."""
    # Ctrl-C reaches the whole process group: the collector decides when this process ends (by
    # closing its stdin), so an interrupt cannot land in the middle of a write.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers = _answers()
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    main()
