"""The hashing embedder: the documented features, deterministic, unit length, lexical."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import subprocess
import sys

import pytest

from conclave.platform.embedding import HashingEmbedder, load_embedder

TEXTS = [
    "Harbour crane inspection 42",
    "title: harbour crane inspection 42\nregion: north",
    "Ünïcödé wörds, MIXED case and repeated repeated repeated words",
    "a",
    "",
    "   \n\t ",
]


def _reference(text: str, dimensions: int) -> list[float]:
    """The embedder's definition, one feature at a time (the docstring's recipe)."""
    words = [word.lower() for word in re.findall(r"\w+", text)]
    features = [("w:" + word, 1.0) for word in words]
    features += [(f"b:{a} {b}", 0.7) for a, b in itertools.pairwise(words)]
    for word in words:
        padded = f"<{word}>"
        features += [("c:" + padded[i : i + 3], 0.3) for i in range(len(padded) - 2)]
    vector = [0.0] * dimensions
    for feature, weight in features:
        value = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
        vector[(value >> 1) % dimensions] += weight if value & 1 else -weight
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else vector


@pytest.mark.parametrize("dimensions", [16, 384])
def test_vectors_follow_the_definition(dimensions: int) -> None:
    embedder = HashingEmbedder(dimensions)
    # Twice: the second batch is answered from the word and pair caches.
    for vectors in (embedder.embed(TEXTS), embedder.embed(TEXTS)):
        assert len(vectors) == len(TEXTS)
        for text, vector in zip(TEXTS, vectors, strict=True):
            assert vector == pytest.approx(_reference(text, dimensions), abs=1e-6)


def test_unit_length_and_zero_for_texts_without_words() -> None:
    vectors = HashingEmbedder(64).embed(TEXTS)
    for text, vector in zip(TEXTS, vectors, strict=True):
        length = math.sqrt(sum(x * x for x in vector))
        assert length == pytest.approx(1.0 if text.strip() else 0.0, abs=1e-6)
    assert HashingEmbedder(64).embed([]) == []


def test_shared_words_are_closer_than_unrelated_text() -> None:
    crane, crane_again, river = HashingEmbedder().embed(
        ["crane inspection at the harbour", "harbour crane inspection", "river flood sensor"]
    )
    assert sum(a * b for a, b in zip(crane, crane_again, strict=True)) > 0.5
    assert abs(sum(a * b for a, b in zip(crane, river, strict=True))) < 0.2


def test_same_vectors_in_another_process() -> None:
    # Python salts str hashes per process; the embedder must not depend on them.
    script = (
        "import json; from conclave.platform.embedding import HashingEmbedder as H; "
        "print(json.dumps(H(32).embed(['harbour crane'])[0]))"
    )
    other = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert json.loads(other.stdout) == HashingEmbedder(32).embed(["harbour crane"])[0]


def test_caches_stay_bounded() -> None:
    embedder = HashingEmbedder(32)
    embedder.cache_limit = 10
    texts = [f"word{i} other{i}" for i in range(50)]
    assert embedder.embed(texts) == HashingEmbedder(32).embed(texts)
    assert len(embedder._words) <= 10 and len(embedder._pairs) <= 10


def test_load_embedder_names() -> None:
    assert load_embedder("hashing", 48).name == "hashing-48"
    with pytest.raises(ValueError, match="neither"):
        load_embedder("not-a-spec", 48)
    with pytest.raises(ValueError, match="at least 16"):
        HashingEmbedder(8)
