"""Integrity checks of Evidence Packs: re-hash the content; for a pack stored before the log
``packs``, recompute its chain links; for a logged pack, check it against the log
(:mod:`conclave.edge.pack_check`)."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.edge import store
from conclave.edge.blobs import BlobStore
from conclave.edge.chain import GENESIS, chain_hash
from conclave.edge.models import ChainVerifyResult, VerifyResult
from conclave.edge.pack_check import check_logged
from conclave.edge.records import EvidencePack
from conclave.platform.errors import NotFound
from conclave.platform.inputs import UnsafeInput, UnsafeValue, text_problem
from conclave.platform.problem_types import ProblemCode
from conclave.platform.tlog.log import TransparencyLog

# Evidence ids are the UUIDs this service issues: anything else cannot name a pack, and is not
# sent to the store (PostgreSQL refuses NUL in a query parameter with an error, not a miss).
_EVIDENCE_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


async def pack_or_404(
    engine: AsyncEngine, evidence_id: str, *, uploaded_by: str | None = None
) -> EvidencePack:
    """The Evidence Pack ``evidence_id``, or a 404 (422 ``UNSAFE_INPUT`` for NUL). With
    ``uploaded_by``, only a pack that user uploaded: another's, or one stored before uploaders
    were recorded, is answered exactly as a missing one, so that ids cannot be probed."""
    kind = text_problem(evidence_id)
    if kind is not None:
        raise UnsafeInput(UnsafeValue(("path", "evidence_id"), kind))
    row = await store.get_pack(engine, evidence_id) if _EVIDENCE_ID.match(evidence_id) else None
    if row is None or (uploaded_by is not None and row.uploaded_by != uploaded_by):
        raise NotFound(
            f"No Evidence Pack {evidence_id[:64]!r}.", code=ProblemCode.EVIDENCE_NOT_FOUND
        )
    return row


async def _content(blobs: BlobStore, row: EvidencePack) -> dict[str, Any]:
    found = await blobs.digest(row.sha256)
    if found is None:
        return {"ok": False, "problem": "content_missing", "expected_sha256": row.sha256}
    actual, size = found
    ok = actual == row.sha256 and size == row.size_bytes
    return {
        "ok": ok,
        "problem": None if ok else "content_modified",
        "expected_sha256": row.sha256,
        "actual_sha256": actual,
        "expected_size": row.size_bytes,
        "actual_size": size,
    }


async def verify_pack(
    engine: AsyncEngine,
    blobs: BlobStore,
    evidence_id: str,
    pack_log: TransparencyLog | None,
    *,
    uploaded_by: str | None = None,
) -> VerifyResult:
    """Re-hash one pack's content; check a chained pack's record hash and both of its links, a
    logged pack's entry, content and inclusion against the log ``pack_log``. With
    ``uploaded_by``, only a pack that user uploaded (:func:`pack_or_404`)."""
    row = await pack_or_404(engine, evidence_id, uploaded_by=uploaded_by)
    content = await _content(blobs, row)
    if not row.chained:
        logged = await check_logged(pack_log, row, content)
        # Neither chained nor proven by the log (not logged, pending, checked with the log off):
        # nothing shows the pack is what was accepted, so it is not valid.
        valid = bool(content["ok"]) and logged["ok"] is True
        return VerifyResult(
            evidence_id=row.evidence_id,
            valid=valid,
            content=content,
            record=None,
            links=None,
            log=logged,
        )
    recomputed = chain_hash(row.columns())
    record_ok = recomputed == row.chain_hash
    record = {
        "ok": record_ok,
        "stored": row.chain_hash,
        "recomputed": recomputed,
    }
    near = await store.neighbours(engine, row.chain_seq)
    before = near.get(row.chain_seq - 1)
    expected_prev = GENESIS if row.chain_seq == 1 else (before.chain_hash if before else None)
    after = near.get(row.chain_seq + 1)
    previous_ok = expected_prev == row.prev_chain_hash
    next_ok = after is None or after.prev_chain_hash == row.chain_hash
    links = {"previous_ok": previous_ok, "next_ok": next_ok, "chain_seq": row.chain_seq}
    valid = bool(content["ok"]) and record_ok and previous_ok and next_ok
    return VerifyResult(
        evidence_id=row.evidence_id,
        valid=valid,
        content=content,
        record=record,
        links=links,
        log=None,
    )


async def verify_chain(
    engine: AsyncEngine, blobs: BlobStore, *, after_seq: int, limit: int, content: bool
) -> ChainVerifyResult:
    """Walk ``limit`` packs of the chain (the packs stored before the log ``packs``) after
    position ``after_seq``; list every problem."""
    rows = await store.chained_packs(engine, max(0, after_seq - 1), limit + 1)
    previous: str | None = GENESIS
    if after_seq > 0:
        if not rows or rows[0].chain_seq != after_seq:
            raise NotFound(
                f"No Evidence Pack at chain position {after_seq}.", code=ProblemCode.NOT_FOUND
            )
        previous = rows.pop(0).chain_hash
    rows = rows[:limit]
    problems: list[dict[str, Any]] = []
    expected_seq = after_seq + 1

    def problem(row: EvidencePack, kind: str) -> None:
        if len(problems) < 100:
            problems.append(
                {"chain_seq": row.chain_seq, "evidence_id": row.evidence_id, "problem": kind}
            )

    for row in rows:
        if row.chain_seq != expected_seq:
            problem(row, "gap")
        if row.prev_chain_hash != previous:
            problem(row, "broken_link")
        if chain_hash(row.columns()) != row.chain_hash:
            problem(row, "record_modified")
        if content:
            checked = await _content(blobs, row)
            if not checked["ok"]:
                problem(row, checked["problem"])
        previous, expected_seq = row.chain_hash, row.chain_seq + 1
    head = await store.get_head(engine)
    complete = len(rows) < limit
    if complete and (head.chain_seq != expected_seq - 1 or head.chain_hash != previous):
        problems.append(
            {"chain_seq": head.chain_seq, "evidence_id": None, "problem": "head_mismatch"}
        )
    return ChainVerifyResult(
        valid=not problems,
        checked=len(rows),
        problems=problems,
        head={"chain_seq": head.chain_seq, "chain_hash": head.chain_hash},
        next_after_seq=None if complete else expected_seq - 1,
    )
