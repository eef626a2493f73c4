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
    """Feature hashing over word uni/bigrams and character trigrams (lexical, no model file).

    Features: every lower-cased word (weight 1.0), every pair of neighbouring words (0.7) and
    every character trigram of each word padded as ``<word>`` (0.3). Each feature's blake2b
    digest picks a bucket and a sign. Texts repeat words far more than they bring new ones, so
    the buckets of each word (its unigram and trigrams) and of each word pair are remembered, up
    to :attr:`cache_limit` entries each (then forgotten at once and rebuilt); a batch is then
    summed into one matrix by numpy. This is much faster than hashing every feature of every
    text (docs/benchmarks.md), and gives the same vectors up to float rounding (sums are taken
    in float64).
    """

    cache_limit = 200_000

    def __init__(self, dimensions: int = 384) -> None:
        if dimensions < 16:
            raise ValueError("dimensions must be at least 16")
        self.dimensions = dimensions
        self.name = f"hashing-{dimensions}"
        # word -> (buckets, signed weights) of its unigram and trigrams; pair -> one of each.
        # Plain dicts: a get or set is atomic under the GIL, so threads may share them.
        self._words: dict[str, tuple[list[int], list[float]]] = {}
        self._pairs: dict[tuple[str, str], tuple[int, float]] = {}

    def _slot(self, feature: str, weight: float) -> tuple[int, float]:
        # blake2b, not hash(): Python's string hash is salted per process.
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return (value >> 1) % self.dimensions, weight if value & 1 else -weight

    def _word(self, word: str) -> tuple[list[int], list[float]]:
        known = self._words.get(word)
        if known is None:
            padded = f"<{word}>"
            slots = [self._slot("w:" + word, 1.0)]
            slots += [self._slot("c:" + padded[i : i + 3], 0.3) for i in range(len(padded) - 2)]
            known = ([bucket for bucket, _ in slots], [weight for _, weight in slots])
            if len(self._words) >= self.cache_limit:
                self._words.clear()
            self._words[word] = known
        return known

    def _pair(self, pair: tuple[str, str]) -> tuple[int, float]:
        known = self._pairs.get(pair)
        if known is None:
            known = self._slot(f"b:{pair[0]} {pair[1]}", 0.7)
            if len(self._pairs) >= self.cache_limit:
                self._pairs.clear()
            self._pairs[pair] = known
        return known

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts``; an empty text gives the zero vector."""
        rows: list[int] = []
        buckets: list[int] = []
        weights: list[float] = []
        for row, text in enumerate(texts):
            words = [word.lower() for word in _WORD.findall(text)]
            before = len(buckets)
            for word in words:
                word_buckets, word_weights = self._word(word)
                buckets += word_buckets
                weights += word_weights
            for pair in itertools.pairwise(words):
                bucket, weight = self._pair(pair)
                buckets.append(bucket)
                weights.append(weight)
            rows += itertools.repeat(row, len(buckets) - before)
        cells = np.asarray(rows, dtype=np.int64) * self.dimensions
        cells += np.asarray(buckets, dtype=np.int64)
        size = len(texts) * self.dimensions
        # float64 sums; with no feature at all numpy would answer integers.
        sums = np.bincount(cells, np.asarray(weights, dtype=np.float64), minlength=size)
        matrix = sums.astype(np.float64, copy=False).reshape(len(texts), self.dimensions)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        np.divide(matrix, norms, out=matrix, where=norms > 0)
        vectors: list[list[float]] = matrix.astype(np.float32).tolist()
        return vectors


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
