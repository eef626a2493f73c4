"""Check a logged Evidence Pack against the log ``packs``: its stored row must rebuild the leaf's
entry, its stored bytes must hash to the ``sha256`` the entry holds, and the leaf must be under the
latest checkpoint, proven with the log's own verifier keys as any reader would prove it."""

from __future__ import annotations

import json
from typing import Any

from conclave.edge.pack_log import pack_entry, receipt_path
from conclave.edge.records import EvidencePack
from conclave.platform.clock import as_utc
from conclave.platform.tlog.errors import LogCorrupted
from conclave.platform.tlog.log import TransparencyLog
from conclave.platform.transparency.errors import TransparencyError
from conclave.platform.transparency.hashing import leaf_hash
from conclave.platform.transparency.note import VerifierSet
from conclave.platform.transparency.receipt import verify_receipt


async def check_logged(
    log: TransparencyLog | None, row: EvidencePack, content: dict[str, Any]
) -> dict[str, Any]:
    """The log's part of a pack's verification: ``state`` and the checks (below); ``ok`` only
    when the pack is proven by the log (a pack not logged, not yet under a checkpoint, or
    checked by a process with the log off is not).

    - ``entry_ok``: the entry rebuilt from the stored row is the leaf's data (before the leaf is
      integrated: hashes to the leaf hash the row recorded);
    - ``content_ok``: the stored bytes hash to the entry's ``sha256`` (and have its size);
    - ``included``: the leaf is under the latest checkpoint, which opens with the log's keys.
    """
    if row.log_leaf_hash is None:
        return {"state": "not_logged", "ok": False}
    found: dict[str, Any] = {
        "leaf_hash": row.log_leaf_hash.hex(),
        "receipt": receipt_path(row.log_leaf_hash),
    }
    if log is None:  # EDGE_PACK_LOG is off in this process: nothing to check against
        return {**found, "state": "unchecked", "ok": False}
    rebuilt = pack_entry(row)
    where = await log.locate(row.log_leaf_hash)
    if where.index is None or not where.integrated:
        entry_ok = leaf_hash(rebuilt) == row.log_leaf_hash
        coming = where.index is not None or await log.may_still_come(as_utc(row.created_at))
        state = "pending" if coming else "not_found"
        # Pending is not valid yet: nothing proves the pack until its checkpoint is signed.
        return {**found, "state": state, "ok": False, "entry_ok": entry_ok}
    try:
        leaf = await log.leaf(where.index)
    except LogCorrupted:
        return {**found, "state": "log_corrupted", "ok": False, "index": where.index}
    size = None
    try:
        receipt = await log.receipt(where.index)
        opened = verify_receipt(receipt, VerifierSet(log.keys.verifiers), leaf.data)
        size, included = opened.checkpoint.size, True
    except TransparencyError:  # BeyondIntegrated too: the leaf is not under the checkpoint
        included = False
    entry_ok = leaf.data == rebuilt
    logged = _facts(leaf.data)
    same_digest = content.get("actual_sha256") == logged.get("sha256")
    content_ok = same_digest and content.get("actual_size") == logged.get("size_bytes")
    return {
        **found,
        "state": "included",
        "ok": entry_ok and content_ok and included,
        "index": where.index,
        "checkpoint_size": size,
        "entry_ok": entry_ok,
        "content_ok": content_ok,
        "included": included,
    }


def _facts(data: bytes) -> dict[str, Any]:
    """The leaf's entry as a JSON object (empty if it is not one: nothing in it then matches)."""
    try:
        facts = json.loads(data)
    except ValueError:
        return {}
    return facts if isinstance(facts, dict) else {}
