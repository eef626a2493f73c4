"""Local intent detection: example utterances per intent, scored with the platform embedder.

The semantic-router design: every intent is a set of example utterances; a query's score for an
intent is the cosine similarity to its nearest example, blended with the mean of its three nearest
(one lucky lexical overlap should not decide alone). The best intent wins when its score clears that
intent's threshold; otherwise the answer is ``unknown``. No LLM and no network: the embedder is the
same one semantic memory uses (:mod:`conclave.platform.embedding`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml

from conclave.platform.embedding import Embedder

UNKNOWN = "unknown"
_NEAREST = 3
_MAX_WEIGHT = 0.7  # weight of the nearest example; the rest goes to the mean of the top three
# Short queries repeat (greetings, thanks, stock questions): their answers are remembered. Long ones
# rarely do and would only fill the memory.
_CACHE_CHARS = 256
_CACHE_SIZE = 4096


@dataclass(frozen=True)
class Intent:
    """One intent: its name, example utterances, threshold, and whether to search the query."""

    name: str
    examples: tuple[str, ...]
    threshold: float
    lookup: bool = True


@dataclass(frozen=True)
class IntentMatch:
    """The detected intent, its score (0 for ``unknown``) and the nearest intent's score."""

    intent: str
    confidence: float
    best_score: float
    lookup: bool = True


class IntentConfigError(ValueError):
    """The intents file is malformed."""


def parse_intents(document: Mapping[str, Any]) -> list[Intent]:
    """Intents from a parsed config document (``defaults`` + ``intents`` mapping)."""
    if not isinstance(document, Mapping) or not isinstance(document.get("intents"), Mapping):
        raise IntentConfigError("the intents file needs an 'intents' mapping")
    defaults = document.get("defaults") or {}
    intents = []
    for name, body in document["intents"].items():
        if not isinstance(body, Mapping):
            raise IntentConfigError(f"intent {name!r} must be a mapping")
        examples = body.get("examples")
        if not isinstance(examples, list) or not examples:
            raise IntentConfigError(f"intent {name!r} needs a non-empty 'examples' list")
        if not all(isinstance(example, str) and example.strip() for example in examples):
            raise IntentConfigError(f"intent {name!r}: every example must be a non-empty string")
        if str(name) == UNKNOWN:
            raise IntentConfigError(f"{UNKNOWN!r} is the answer when no intent matches")
        threshold = float(body.get("threshold", defaults.get("threshold", 0.3)))
        lookup = bool(body.get("lookup", defaults.get("lookup", True)))
        intents.append(Intent(str(name), tuple(examples), threshold, lookup))
    if not intents:
        raise IntentConfigError("the intents file defines no intent")
    return intents


def load_intents(path: Path | None = None) -> list[Intent]:
    """Intents from a YAML or JSON file; the built-in set when ``path`` is ``None``."""
    if path is None:
        text = resources.files("conclave.graph").joinpath("intents.yaml").read_text("utf-8")
    else:
        text = path.read_text("utf-8")
    try:
        document = json.loads(text) if path and path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise IntentConfigError(f"intents file is not valid YAML/JSON: {exc}") from exc
    return parse_intents(document)


class IntentClassifier:
    """Scores queries against the example utterances of every intent."""

    def __init__(self, intents: Sequence[Intent], embedder: Embedder) -> None:
        self.intents = tuple(intents)
        self.embedder = embedder
        examples = [example for intent in self.intents for example in intent.examples]
        # Example vectors are computed once: a dispatch embeds only its own query. Row i of
        # ``_index`` holds the example rows of intent i, padded with a row of zeros (the last).
        vectors = np.asarray(embedder.embed(examples), dtype=np.float32)
        self._examples = np.vstack([vectors, np.zeros((1, vectors.shape[1]), np.float32)])
        widest = max(len(intent.examples) for intent in self.intents)
        self._index = np.full((len(self.intents), widest), len(examples), dtype=np.intp)
        start = 0
        for row, intent in enumerate(self.intents):
            count = len(intent.examples)
            self._index[row, :count] = np.arange(start, start + count)
            start += count
        self._names = [intent.name for intent in self.intents]
        self._recent: dict[str, IntentMatch] = {}
        self._recent_lock = threading.Lock()

    def scores(self, text: str) -> dict[str, float]:
        """Each intent's score for ``text`` (cosine; empty text scores 0 everywhere)."""
        if not text.strip():
            return dict.fromkeys(self._names, 0.0)
        query: npt.NDArray[np.float32] = np.asarray(self.embedder.embed([text])[0], np.float32)
        # Padding rows score 0, below any real match; negative cosines are clipped to 0 too.
        similarities = np.maximum(self._examples @ query, 0.0)[self._index]
        nearest = -np.sort(-similarities, axis=1)[:, :_NEAREST]
        blended = _MAX_WEIGHT * nearest[:, 0] + (1 - _MAX_WEIGHT) * nearest.mean(axis=1)
        return dict(zip(self._names, blended.tolist(), strict=True))

    def remembered(self, text: str) -> IntentMatch | None:
        """The match of a recently classified short ``text``, without embedding anything."""
        return self._recent.get(text)

    def classify(self, text: str) -> IntentMatch:
        """The best intent clearing its threshold, or ``unknown``."""
        match = self._recent.get(text)
        if match is None:
            match = self._classify(text)
            if len(text) <= _CACHE_CHARS:
                self._remember(text, match)
        return match

    def _remember(self, text: str, match: IntentMatch) -> None:
        # Worker threads classify too: evictions take the lock, reads need none (a dict lookup
        # is atomic). First in, first out: a query still in use comes back at its next miss.
        with self._recent_lock:
            if len(self._recent) >= _CACHE_SIZE:
                del self._recent[next(iter(self._recent))]
            self._recent[text] = match

    def _classify(self, text: str) -> IntentMatch:
        scores = self.scores(text)
        best = max(self.intents, key=lambda intent: scores[intent.name])
        best_score = round(scores[best.name], 4)
        if best_score > 0 and best_score >= best.threshold:
            return IntentMatch(best.name, best_score, best_score, best.lookup)
        return IntentMatch(UNKNOWN, 0.0, best_score, True)
