"""The hashing embedder's caches under concurrent callers (the Qdrant-server path
embeds queries with asyncio.to_thread, so several threads share one embedder)."""

from __future__ import annotations

import itertools
import sys
import threading

from conclave.platform.embedding import HashingEmbedder


def test_caches_stay_within_cache_limit_with_concurrent_callers() -> None:
    embedder = HashingEmbedder(64)
    embedder.cache_limit = 1000
    counter = itertools.count()
    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, len(embedder._words), len(embedder._pairs), len(embedder._trigrams))

    def work() -> None:
        for _ in range(200):
            base = next(counter)
            embedder.embed([" ".join(f"u{base}x{i}" for i in range(900))])

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        watcher = threading.Thread(target=watch)
        workers = [threading.Thread(target=work) for _ in range(6)]
        watcher.start()
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    finally:
        done.set()
        watcher.join()
        sys.setswitchinterval(previous)
    assert peak <= embedder.cache_limit, peak
