"""Check transparency receipts and consistency bundles on the device, with no server: the log's
verifier keys (``GET /logs/{name}/keys``) are all that is needed.

The same checks as ``conclave verify receipt`` and ``conclave verify consistency``; both run the
platform's verifiable core (:mod:`conclave.platform.transparency`), which holds no store and no
settings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from conclave.platform.transparency import base64text
from conclave.platform.transparency.checkpoint import Checkpoint, SignedCheckpoint
from conclave.platform.transparency.errors import MalformedInput, RootMismatch
from conclave.platform.transparency.note import VerifierSet
from conclave.platform.transparency.note_keys import NoteVerifier
from conclave.platform.transparency.receipt import (
    ConsistencyBundle,
    Receipt,
    open_log_checkpoint,
    verify_consistency_bundle,
    verify_receipt,
)

MAX_KEYS_BYTES = 1 << 20


def verifier_keys(keys: Iterable[str] | str) -> VerifierSet:
    """The verifier keys a reader trusts, from key texts (``<name>+<id>+<key>``), whitespace
    separated, or the JSON document of ``GET /logs/{name}/keys``. :class:`MalformedInput`
    (a :class:`MalformedKey`) for anything else, and for no key at all."""
    texts = [keys] if isinstance(keys, str) else list(keys)
    found: list[NoteVerifier] = []
    for text in texts:
        if not isinstance(text, str) or len(text) > MAX_KEYS_BYTES:
            raise MalformedInput("a verifier key is text of at most 1 MiB")
        found += [NoteVerifier.from_vkey(item) for item in _key_texts(text)]
    if not found:
        raise MalformedInput("no verifier key given")
    return VerifierSet(found)


def _key_texts(text: str) -> list[str]:
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            document: Any = json.loads(stripped)
            return [str(key["vkey"]) for key in document["keys"]]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise MalformedInput("the keys document is not that of GET /logs/{name}/keys") from None
    return stripped.split()


def check_receipt(
    receipt: bytes | str | dict[str, Any],
    keys: Iterable[str] | str | VerifierSet,
    data: bytes | None = None,
) -> SignedCheckpoint:
    """Check a receipt (the JSON of ``GET /logs/{name}/receipt/{index}``, or an answer's
    ``receipt``) with the log's verifier keys, and that ``data``, if given, is the entry it is a
    receipt of. The opened checkpoint if it holds; a ``TransparencyError`` otherwise
    (:class:`MalformedInput` for a document or key of the wrong shape, a
    ``VerificationFailed`` for a claim that does not hold)."""
    verifiers = keys if isinstance(keys, VerifierSet) else verifier_keys(keys)
    return verify_receipt(Receipt.parse(receipt), verifiers, data)


def check_consistency(
    old: bytes | str | dict[str, Any],
    bundle: bytes | str | dict[str, Any],
    keys: Iterable[str] | str | VerifierSet,
) -> tuple[SignedCheckpoint, SignedCheckpoint]:
    """Check that the log has not rewritten the past a reader saw: ``old`` is what the reader
    kept (a signed checkpoint, or a receipt, whose checkpoint is taken), ``bundle`` the
    consistency bundle of ``GET /logs/{name}/proof/consistency?from=&to=&checkpoints=true``
    starting from that checkpoint's size. The old and new opened checkpoints if ``bundle``'s
    newer checkpoint extends ``old``."""
    verifiers = keys if isinstance(keys, VerifierSet) else verifier_keys(keys)
    kept = _checkpoint_text(old)
    parsed = ConsistencyBundle.parse(bundle)
    first, second = verify_consistency_bundle(parsed, verifiers)
    mine = open_log_checkpoint(kept, verifiers, first.checkpoint.origin)
    if mine.checkpoint != first.checkpoint:
        raise RootMismatch(
            f"the proof starts from another checkpoint ({first.checkpoint.size} leaves) than the "
            f"one kept ({mine.checkpoint.size} leaves)"
            if mine.checkpoint.size != first.checkpoint.size
            else "the kept checkpoint and the proof's have one size and two roots: the log forked"
        )
    return mine, second


def _checkpoint_text(document: bytes | str | dict[str, Any]) -> str:
    if isinstance(document, dict):
        return Receipt.parse(document).checkpoint
    if isinstance(document, bytes):
        try:
            text = document.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedInput("the kept checkpoint is not UTF-8 text") from None
    else:
        text = document
    if text.startswith("\ufeff"):  # a signed note starts with its origin, never a byte-order mark
        raise MalformedInput("the kept checkpoint starts with a byte-order mark")
    if text.lstrip().startswith("{"):
        return Receipt.parse(document).checkpoint
    return text


def checkpoint_summary(checkpoint: Checkpoint) -> str:
    """One line naming a checkpoint: its origin, size and root."""
    root = base64text.encode(checkpoint.root_hash)
    return f"{checkpoint.origin} at {checkpoint.size} leaves, root {root}"
