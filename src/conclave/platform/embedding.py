"""Text embeddings for semantic memory, behind one small protocol.

The default, :class:`HashingEmbedder`, needs no downloaded model: it hashes word unigrams, word
bigrams and character trigrams into a fixed number of signed buckets (the "hashing trick") and
L2-normalises the result. It is **lexical**, not neural: texts that share words or word pieces land
close together, synonyms do not. It is deterministic across processes and versions of Python, so
vectors written by one replica match queries embedded by another.

A neural model plugs in through :func:`load_embedder` with ``"package.module:factory"``, where the
factory takes ``dimensions`` and returns an object with the :class:`Embedder` shape (for example a
wrapper around a sentence-transformers model shipped in a package).
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

_WORD = re.compile(r"\w+", re.UNICODE)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors of :attr:`dimensions` floats."""

    name: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


class HashingEmbedder:
    """Feature hashing over word uni/bigrams and character trigrams (lexical, no model file)."""

    def __init__(self, dimensions: int = 384) -> None:
        if dimensions < 16:
            raise ValueError("dimensions must be at least 16")
        self.dimensions = dimensions
        self.name = f"hashing-{dimensions}"

    def _features(self, text: str) -> list[tuple[str, float]]:
        words = [word.lower() for word in _WORD.findall(text)]
        features: list[tuple[str, float]] = [("w:" + word, 1.0) for word in words]
        features += [(f"b:{a} {b}", 0.7) for a, b in itertools.pairwise(words)]
        for word in words:
            padded = f"<{word}>"
            features += [("c:" + padded[i : i + 3], 0.3) for i in range(len(padded) - 2)]
        return features

    def _vector(self, text: str) -> npt.NDArray[np.float32]:
        vector = np.zeros(self.dimensions, dtype=np.float32)
        for feature, weight in self._features(text):
            # blake2b, not hash(): Python's string hash is salted per process.
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            sign = 1.0 if value & 1 else -1.0
            vector[(value >> 1) % self.dimensions] += sign * weight
        norm = float(np.linalg.norm(vector))
        if norm > 0:
            vector /= norm
        return vector

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts``; an empty text gives the zero vector."""
        return [self._vector(text).tolist() for text in texts]


def load_embedder(spec: str, dimensions: int) -> Embedder:
    """Build the embedder named by ``spec``: ``"hashing"`` or ``"package.module:factory"``."""
    if spec == "hashing":
        return HashingEmbedder(dimensions)
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"embedder {spec!r} is neither 'hashing' nor 'package.module:factory'")
    factory = getattr(importlib.import_module(module_name), attribute)
    embedder = factory(dimensions=dimensions)
    if not isinstance(embedder, Embedder):
        raise TypeError(f"{spec} did not return an Embedder")
    return embedder
