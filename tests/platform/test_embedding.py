"""The hashing embedder: the documented features, deterministic, unit length, lexical."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import subprocess
import sys
import tracemalloc

import numpy as np
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


# Texts that have broken text pipelines: not a word character, or lower-casing that changes
# length or depends on the neighbours, in scripts other than Latin.
HOSTILE = [
    "lone \ud800 surrogates\udfff between\ud83d words",
    "NUL\x00inside a\x00\x00word \x00",
    "\x00",
    "İstanbul ΟΔΟΣ ΟΔΟΣ'\u0391 Σ ǅemal Straße ẞ ﬁre ᏣᎳᎩ Ⅻ",
    "中文字符没有空格 日本語のテキスト 한국어 텍스트",
    "مرحبا بالعالم — क्षत्रिय ٣٤٥ e\u0301te x\u200dy 😀 \U0001d518\U0001d52b\U0001d526 (Fraktur)",
    "MIXED ascii and ünïcödé in one text",
    " ".join(f"w{i}{chr(0x4E00 + i)}" for i in range(3000)),  # many distinct words
    "harbour " * 5000 + "crane",  # long, repetitive
    "x" * 70_000 + " after a giant word " + "Ω" * 40_000,  # words longer than a group
    "tail \x00",
]


def _assert_follows_the_definition(
    embedder: HashingEmbedder, texts: list[str], dimensions: int
) -> None:
    # Twice: the second batch is answered from the caches.
    for vectors in (embedder.embed(texts), embedder.embed(texts)):
        assert len(vectors) == len(texts)
        for text, vector in zip(texts, vectors, strict=True):
            assert vector == pytest.approx(_reference(text, dimensions), abs=1e-6), text[:40]


@pytest.mark.parametrize("dimensions", [16, 384])
def test_vectors_follow_the_definition(dimensions: int) -> None:
    _assert_follows_the_definition(HashingEmbedder(dimensions), TEXTS, dimensions)


@pytest.mark.parametrize("dimensions", [16, 384])
def test_hostile_texts_follow_the_definition(dimensions: int) -> None:
    _assert_follows_the_definition(HashingEmbedder(dimensions), HOSTILE + TEXTS, dimensions)


CUT_TEXTS = [*TEXTS, *HOSTILE[:7], "a bb ccc dddd " * 9, "pneumonoultramicroscopic words"]


@pytest.mark.parametrize("group_chars", [1, 7, 64, 1 << 15])
def test_vectors_do_not_depend_on_how_a_batch_is_cut(group_chars: int) -> None:
    """Small groups: every text cut into pieces, every word past a group summed piece-wise."""
    embedder = HashingEmbedder(32)
    embedder.group_chars = group_chars
    embedder.group_bytes = 1  # a row per group
    _assert_follows_the_definition(embedder, CUT_TEXTS, 32)


def test_a_text_alone_follows_the_definition() -> None:
    """A short text alone is summed without numpy (a query); a long one with it."""
    embedder = HashingEmbedder(32)
    for text in [*CUT_TEXTS, "x" * 40_000, "harbour " * 40]:
        _assert_follows_the_definition(embedder, [text], 32)


def test_matrix_holds_the_same_vectors() -> None:
    embedder = HashingEmbedder(48)
    texts = HOSTILE[:7] + TEXTS
    matrix = embedder.embed_matrix(texts)
    assert matrix.dtype == np.float32 and matrix.shape == (len(texts), 48)
    assert matrix.tolist() == embedder.embed(texts)
    assert embedder.embed_matrix([]).shape == (0, 48)


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
    assert len(embedder._trigrams) <= 10


def test_long_words_are_not_remembered() -> None:
    """A cache entry per word would otherwise hold a copy of any word, however long."""
    embedder = HashingEmbedder(32)
    embedder.embed(["a" * 100_000 + " " + "b" * 1000, "short words " + "c" * 33])
    remembered = [*embedder._words, *embedder._pairs, *embedder._trigrams]
    assert remembered and max(map(len, remembered)) <= 2 * embedder.cached_word_bytes + 1


@pytest.mark.parametrize(
    "texts",
    [
        [" ".join(f"w{i}x" for i in range(60_000))],  # 0.5 MB of distinct words
        ["a" * 500_000 + " b"],  # one word of 0.5 MB
        ["漢字ΣΑ" * 50_000],  # no space and not Latin
        [f"text {i} " + "word " * 100 for i in range(2000)],  # 1 MB in a batch
    ],
    ids=["distinct-words", "giant-word", "cjk", "batch"],
)
def test_memory_stays_bounded_whatever_the_texts(texts: list[str]) -> None:
    """Beyond its (bounded) caches, a batch needs memory for a group at a time, plus a few
    copies of its longest text: not a list entry per feature of the whole batch."""
    embedder = HashingEmbedder(384)
    embedder.cache_limit = 1000
    tracemalloc.start()
    try:
        matrix = embedder.embed_matrix(texts)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    longest = max(len(text.encode()) for text in texts)
    assert peak < matrix.nbytes + 8 * longest + 8 * 2**20, peak


def test_load_embedder_names() -> None:
    assert load_embedder("hashing", 48).name == "hashing-48"
    with pytest.raises(ValueError, match="neither"):
        load_embedder("not-a-spec", 48)
    with pytest.raises(ValueError, match="at least 16"):
        HashingEmbedder(8)
