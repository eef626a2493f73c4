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
import math
import re
import string
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol, TypeVar, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

_Ints = npt.NDArray[np.intp]
_Floats = npt.NDArray[np.float64]
_Piece = tuple[list[bytes], bool]
_Cached = TypeVar("_Cached", int, bytes)

# Texts of a group are joined around a NUL, which is no word character (a NUL inside a text is
# replaced by a space first, which leaves its words as they were) and so comes out as a token
# of its own between the words of two rows.
_SEPARATOR = "\x00"
_SEPARATOR_BYTES = _SEPARATOR.encode()
_JOINER = f" {_SEPARATOR} "
_TOKEN = re.compile(r"\w+|\x00")
_NON_WORD = re.compile(r"\W")
# ASCII text is tokenised as bytes: every byte that is not a word character (``\w`` on ASCII:
# letters, digits, underscore) nor the separator becomes a space, and bytes.split does the rest.
_ASCII_WORDS = bytes(
    byte if chr(byte) in string.ascii_letters + string.digits + "_" + _SEPARATOR else ord(" ")
    for byte in range(256)
)
# A feature's code is its bucket shifted left by one, with the low bit set when its sign is
# negative: its signed weight is then a table lookup (by position too, in a word's run of codes).
_WEIGHTS = (0.3, -0.3, 1.0, -1.0)  # trigram, then unigram (a word's first code)
_PAIR_WEIGHTS = (0.7, -0.7)
_TRIGRAM_THEN_UNIGRAM = np.array(_WEIGHTS)
_PAIR = np.array(_PAIR_WEIGHTS)
_UNIGRAM = 2
# A word's run of codes is kept as the bytes of an array of C ints (compact, joined cheaply).
_CODE = np.dtype(np.intc)
# Up to this many tokens, a group is summed in plain Python: numpy's cost per call would
# be most of the work for a short query.
_FEW_TOKENS = 32


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
    every character trigram of each word padded as ``<word>`` (0.3). The blake2b digest of a
    feature's UTF-8 text (``w:word``, ``b:word word`` or ``c:gram``) picks a bucket and a sign.

    A batch is tokenised a group of texts at a time; the features of a group that are not
    remembered are hashed once each, and the rest (the features each word brings, signs,
    weights, sums) is numpy. Codes are remembered per word, per trigram and per word pair, up to
    :attr:`cache_limit` entries each (then that cache is forgotten at once and rebuilt); a word
    longer than :attr:`cached_word_bytes` is never kept, so the caches stay small whatever the
    texts. A group holds about :attr:`group_chars` characters, which bounds the temporary
    arrays: a longer text is cut between words into pieces (the pair across a cut still counts)
    and a longer word's trigrams are summed a piece at a time. The vectors are those of the
    feature-by-feature definition up to float rounding (sums are taken in float64).
    """

    cache_limit = 100_000
    cached_word_bytes = 32
    group_chars = 1 << 15
    group_bytes = 1 << 20

    def __init__(self, dimensions: int = 384) -> None:
        if dimensions < 16:
            raise ValueError("dimensions must be at least 16")
        self.dimensions = dimensions
        self.name = f"hashing-{dimensions}"
        # Keyed by UTF-8 bytes: word -> the codes of its unigram then its trigrams (int32
        # bytes); trigram -> code; b"word word" -> code. Plain dicts shared by threads: a get is
        # atomic under the GIL, and additions go through _remember's lock so the limit holds.
        self._words: dict[bytes, bytes] = {}
        self._trigrams: dict[bytes, int] = {}
        self._pairs: dict[bytes, int] = {}
        # blake2b, not hash(): Python's string hash is salted per process. Each prefix is hashed
        # once: copying a started hasher costs less than starting one per feature.
        self._hashers = {
            kind: hashlib.blake2b(kind, digest_size=8) for kind in (b"w:", b"c:", b"b:")
        }

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts``; an empty text gives the zero vector."""
        vectors: list[list[float]] = []
        for _, block in self._blocks(texts):
            vectors += block.astype(np.float32).tolist()
        return vectors

    def embed_matrix(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The vectors of :meth:`embed` as one float32 array, a row per text.

        For callers that can take an array: turning one into lists of Python floats costs about
        as much as embedding a short text.
        """
        matrix = np.empty((len(texts), self.dimensions), np.float32)
        for first_row, block in self._blocks(texts):
            matrix[first_row : first_row + len(block)] = block
        return matrix

    def _blocks(self, texts: Sequence[str]) -> Iterator[tuple[int, _Floats]]:
        """(first row, the unit vectors of a group of rows), every row once, in order."""
        for first_row, count, pieces in self._groups(texts):
            # Small blocks: numpy's arrays of a group stay in memory the allocator reuses,
            # where larger ones would be fresh pages from the kernel every time.
            block = np.zeros((count, self.dimensions))
            for tokens, carried in pieces:
                self._add(block, tokens, carried)
            if count == 1:  # a query: the same sums, with fewer numpy calls
                norm = math.sqrt(block[0] @ block[0])
                block /= norm or 1.0
            else:
                norms = np.sqrt(np.einsum("ij,ij->i", block, block))
                norms[norms == 0] = 1  # a text without words keeps its zero vector
                block /= norms[:, None]
            yield first_row, block

    def _groups(self, texts: Sequence[str]) -> Iterator[tuple[int, int, Iterable[_Piece]]]:
        """(first row, rows, pieces of tokens): a group of short texts, or one long text."""
        group: list[str] = []
        size = 0
        rows = max(1, self.group_bytes // (8 * self.dimensions))
        for row, text in enumerate(texts):
            if _SEPARATOR in text:
                text = text.replace(_SEPARATOR, " ")
            if group and (size + len(text) > self.group_chars or len(group) == rows):
                yield row - len(group), len(group), [(_tokens(_JOINER.join(group)), False)]
                group, size = [], 0
            if len(text) > self.group_chars:
                yield row, 1, self._pieces(text)
                continue
            group.append(text)
            size += len(text) + len(_JOINER)
        if group:
            yield len(texts) - len(group), len(group), [(_tokens(_JOINER.join(group)), False)]

    def _pieces(self, text: str) -> Iterator[_Piece]:
        """A long text in pieces cut between words, each carrying the last word before it."""
        carried: list[bytes] = []
        start = 0
        while start < len(text):
            cut = _NON_WORD.search(text, min(start + self.group_chars, len(text)))
            end = cut.start() if cut else len(text)
            tokens = _tokens(text[start:end])
            yield carried + tokens, bool(carried)
            carried = tokens[-1:] or carried
            start = end

    def _add(self, block: _Floats, tokens: list[bytes], carried: bool) -> None:
        """Add the features of ``tokens`` (a row apart at each separator) to the rows of ``block``.

        A carried first token only pairs with the next one: its own features were counted.
        """
        if not tokens:
            return
        if len(tokens) <= _FEW_TOKENS and max(map(len, tokens)) <= self.group_chars:
            self._add_few(block, tokens, carried)
            return
        width = self.dimensions
        distinct = list(dict.fromkeys(tokens))
        index = dict(zip(distinct, range(len(distinct)), strict=True))
        ids = np.fromiter(map(index.__getitem__, tokens), np.intp, len(tokens))
        is_word = ids != index.get(_SEPARATOR_BYTES, -1)
        rows = np.cumsum(~is_word)
        owned = is_word.copy()
        owned[0] &= not carried
        codes, starts, lengths, giants = self._word_codes(distinct)
        # Each owned occurrence brings its word's run of codes (unigram first, then trigrams).
        occurrences = ids[owned]
        runs = lengths[occurrences]
        run_ends = np.cumsum(runs)
        at = np.repeat(starts[occurrences] - run_ends + runs, runs)
        at += np.arange(len(at))
        word_codes = codes[at]
        kind = word_codes & 1
        kind[run_ends - runs] |= _UNIGRAM
        cells = block.reshape(-1)
        np.add.at(
            cells,
            np.repeat(rows[owned] * width, runs) + (word_codes >> 1),
            _TRIGRAM_THEN_UNIGRAM[kind],
        )
        pairs = is_word[:-1] & is_word[1:]
        if pairs.any():
            keys = ids[:-1][pairs] * len(distinct) + ids[1:][pairs]
            distinct_keys, which = np.unique(keys, return_inverse=True)
            lefts, rights = np.divmod(distinct_keys, len(distinct))
            words = distinct.__getitem__
            texts = list(
                map(
                    b" ".join,
                    zip(map(words, lefts.tolist()), map(words, rights.tolist()), strict=True),
                )
            )
            pair_codes = self._lookup(self._pairs, b"b:", texts, 2 * self.cached_word_bytes + 1)
            pair_codes = pair_codes[which]
            np.add.at(cells, rows[1:][pairs] * width + (pair_codes >> 1), _PAIR[pair_codes & 1])
        for word_id in giants:
            in_rows = rows[owned & (ids == word_id)]
            if len(in_rows):
                np.add.at(block, in_rows, self._long_word_trigrams(distinct[word_id]))

    def _add_few(self, block: _Floats, tokens: list[bytes], carried: bool) -> None:
        """:meth:`_add` for a handful of tokens (none longer than a group), one at a time."""
        distinct = list(dict.fromkeys(tokens))
        run_of = dict(zip(distinct, self._runs(distinct)[0], strict=True))
        sums: dict[int, float] = {}
        add = sums.get
        base = 0
        before = None
        for at, token in enumerate(tokens):
            if token == _SEPARATOR_BYTES:
                base, before = base + self.dimensions, None
                continue
            if at or not carried:
                kind = _UNIGRAM
                for code in memoryview(run_of[token]).cast("i"):
                    cell = base + (code >> 1)
                    sums[cell] = add(cell, 0.0) + _WEIGHTS[kind | (code & 1)]
                    kind = 0
            if before is not None:
                pair = before + b" " + token
                pair_code = self._pairs.get(pair)
                if pair_code is None:
                    pair_code = self._code(b"b:", pair)
                    if len(pair) <= 2 * self.cached_word_bytes + 1:
                        _remember(self._pairs, {pair: pair_code}, self.cache_limit)
                cell = base + (pair_code >> 1)
                sums[cell] = add(cell, 0.0) + _PAIR_WEIGHTS[pair_code & 1]
            before = token
        cells = np.fromiter(sums, np.intp, len(sums))
        block.reshape(-1)[cells] += np.fromiter(sums.values(), np.float64, len(sums))

    def _word_codes(self, distinct: list[bytes]) -> tuple[_Ints, _Ints, _Ints, list[int]]:
        """The codes of every distinct word in one array, where each word's run starts, its
        length, and the words too long to list their trigrams (their run is their unigram)."""
        runs, giants = self._runs(distinct)
        codes = np.frombuffer(b"".join(runs), _CODE).astype(np.intp)
        lengths = np.fromiter(map(len, runs), np.intp, len(runs)) // _CODE.itemsize
        return codes, np.cumsum(lengths) - lengths, lengths, giants

    def _runs(self, distinct: list[bytes]) -> tuple[list[bytes], list[int]]:
        """Each distinct token's run of codes (none for the separator), and which are words too
        long to list their trigrams (their run is their unigram)."""
        found = list(map(self._words.get, distinct))
        if None not in found:
            return cast(list[bytes], found), []
        runs = [b"" if run is None else run for run in found]
        new: list[int] = []
        giants: list[int] = []
        for at, run in enumerate(found):
            if run is None and distinct[at] != _SEPARATOR_BYTES:
                (giants if len(distinct[at]) > self.group_chars else new).append(at)
        for at, run in zip(new, self._new_words([distinct[at] for at in new]), strict=True):
            runs[at] = run
        for at, code in zip(
            giants, self._hash(b"w:", [distinct[at] for at in giants]), strict=True
        ):
            runs[at] = code.astype(_CODE).tobytes()
        return runs, giants

    def _new_words(self, words: list[bytes]) -> list[bytes]:
        """The runs of words not remembered (remembered now when short enough)."""
        if b"".join(words).isascii():
            padded = [b"<" + word + b">" for word in words]
            grams = [word[at : at + 3] for word in padded for at in range(len(word) - 2)]
            lengths = np.fromiter(map(len, words), np.intp, len(words)) + 1
        else:
            runs_of_grams = [_trigrams(_padded(word), 0, len(word)) for word in words]
            grams = list(itertools.chain.from_iterable(runs_of_grams))
            lengths = np.fromiter(map(len, runs_of_grams), np.intp, len(words)) + 1
        firsts = np.cumsum(lengths) - lengths
        flat = np.empty(int(lengths.sum()), _CODE)
        is_unigram = np.zeros(len(flat), bool)
        is_unigram[firsts] = True
        flat[is_unigram] = self._hash(b"w:", words)
        flat[~is_unigram] = self._codes(self._trigrams, b"c:", grams, 12)
        blob = flat.tobytes()
        size = _CODE.itemsize
        ends = np.cumsum(lengths).tolist()
        runs = [
            blob[first * size : end * size]
            for first, end in zip(firsts.tolist(), ends, strict=True)
        ]
        short = self.cached_word_bytes
        keep = {word: run for word, run in zip(words, runs, strict=True) if len(word) <= short}
        _remember(self._words, keep, self.cache_limit)
        return runs

    def _long_word_trigrams(self, word: bytes) -> _Floats:
        """The summed trigrams of a word longer than a group, a group's length at a time."""
        padded = _padded(word)
        total = np.zeros(self.dimensions)
        for start in range(0, len(padded) - 2, self.group_chars):
            grams = _trigrams(padded, start, start + self.group_chars)
            codes = self._lookup(self._trigrams, b"c:", grams, 12)
            total += np.bincount(codes >> 1, _TRIGRAM_THEN_UNIGRAM[codes & 1], self.dimensions)
        return total

    def _lookup(
        self, known: dict[bytes, int], kind: bytes, features: list[bytes], longest: int
    ) -> _Ints:
        """:meth:`_codes` as an array."""
        return np.array(self._codes(known, kind, features, longest), np.intp)

    def _codes(
        self, known: dict[bytes, int], kind: bytes, features: list[bytes], longest: int
    ) -> list[int]:
        """The codes of ``features``, each not remembered hashed once (and remembered if short)."""
        found = list(map(known.get, features))
        if None not in found:
            return cast(list[int], found)
        missing = list(dict.fromkeys(f for f, c in zip(features, found, strict=True) if c is None))
        fresh = dict(zip(missing, self._hash(kind, missing).tolist(), strict=True))
        _remember(known, {f: c for f, c in fresh.items() if len(f) <= longest}, self.cache_limit)
        return [fresh[f] if c is None else c for f, c in zip(features, found, strict=True)]

    def _code(self, kind: bytes, feature: bytes) -> int:
        """The code of one feature (what :meth:`_hash` computes for many)."""
        hasher = self._hashers[kind].copy()
        hasher.update(feature)
        value = int.from_bytes(hasher.digest(), "little")
        return (value >> 1) % self.dimensions << 1 | (~value & 1)

    def _hash(self, kind: bytes, features: list[bytes]) -> _Ints:
        """The codes of ``features``: one blake2b each, then numpy for bucket and sign."""
        started = self._hashers[kind]
        digests = []
        for feature in features:
            hasher = started.copy()
            hasher.update(feature)
            digests.append(hasher.digest())
        values = np.frombuffer(b"".join(digests), "<u8")
        codes = (values >> 1) % self.dimensions << 1 | (~values & 1)
        return codes.astype(np.intp)


def _tokens(text: str) -> list[bytes]:
    """The words of ``text`` (``str.lower`` of each ``\\w+``) and its separators, in UTF-8."""
    if text.isascii():
        return text.lower().encode().translate(_ASCII_WORDS).split()
    # Lower-casing first could change which characters are word characters ("İ" becomes "i"
    # and a combining dot); a space between words is neither cased nor case-ignorable, so
    # lower-casing them joined is lower-casing each (a final sigma stays final).
    found = _TOKEN.findall(text)
    return " ".join(found).lower().encode().split(b" ") if found else []


def _padded(word: bytes) -> bytes | str:
    """``<word>``: bytes if ASCII (a byte is a character), else characters."""
    return b"<" + word + b">" if word.isascii() else f"<{word.decode()}>"


def _trigrams(padded: bytes | str, start: int, stop: int) -> list[bytes]:
    """The UTF-8 trigrams of ``padded`` that start at characters ``start`` to ``stop - 1``."""
    stop = min(stop, len(padded) - 2)
    if isinstance(padded, bytes):
        return [padded[at : at + 3] for at in range(start, stop)]
    return [padded[at : at + 3].encode() for at in range(start, stop)]


_REMEMBERING = threading.Lock()


def _remember(known: dict[bytes, _Cached], fresh: dict[bytes, _Cached], limit: int) -> None:
    """Add ``fresh`` to a cache, which is forgotten first if it would pass ``limit`` entries.

    Under a lock: threads embedding at once (searches on worker threads) would each pass the
    check and then each add their entries, past the limit."""
    with _REMEMBERING:
        if len(known) + len(fresh) > limit:
            known.clear()
        if len(fresh) <= limit:
            known.update(fresh)


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
