"""Checking a call's audit row against the transparency log ``calls``: was the row changed after
the call answered, and is the call under a signed checkpoint?

The row is the gateway's record; the log is the tamper-evident one. The entry rebuilt from the row
as stored (:func:`conclave.gateway.call_log.call_entry`) must hash to the leaf hash the row
recorded when the call answered, and a leaf of that hash must be in the log under its latest
checkpoint, proven by an inclusion proof checked with the log's own published keys. What each
failure means is in :class:`CallProblem`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from conclave.gateway.call_log import call_entry
from conclave.gateway.records import AuditRow
from conclave.platform.clock import as_utc
from conclave.platform.tlog import LogCorrupted, TransparencyLog
from conclave.platform.transparency import TransparencyError, VerifierSet, leaf_hash
from conclave.platform.transparency.receipt import verify_receipt


class CallProblem(StrEnum):
    """Why a call's audit row does not verify against the log."""

    NOT_LOGGED = "not_logged"
    """The row records no leaf: the call was made with the log off, or settled after its gateway
    died (``interrupted``)."""
    ROW_MODIFIED = "row_modified"
    """The row as stored no longer rebuilds the entry it recorded: a field was changed after the
    call answered (or the recorded leaf hash was)."""
    NOT_YET_LOGGED = "not_yet_logged"
    """No leaf of the row's hash yet, but one may still come: the call ended moments ago, or the
    log's queue still holds leaves queued before it ended (the integrator behind)."""
    MISSING_FROM_LOG = "missing_from_log"
    """No leaf of the row's hash, long after the call ended: the row was inserted or edited in
    the store, or its leaf never committed."""
    LEAF_MODIFIED = "leaf_modified"
    """The log's stored leaf, or its proof, no longer holds (the log itself was edited)."""


@dataclass(frozen=True)
class CallVerification:
    """What checking one call found."""

    ok: bool
    problem: CallProblem | None = None
    log_index: int | None = None
    checkpoint_size: int | None = None


async def verify_call(row: AuditRow, log: TransparencyLog) -> CallVerification:
    """Check ``row`` against the log ``log``."""
    if row.log_leaf_hash is None:
        return CallVerification(False, CallProblem.NOT_LOGGED)
    rebuilt = leaf_hash(call_entry(row))
    if rebuilt != row.log_leaf_hash:
        return CallVerification(False, CallProblem.ROW_MODIFIED)
    where = await log.locate(rebuilt)
    if where.index is None or not where.integrated:
        coming = await log.may_still_come(as_utc(row.completed_at or row.created_at))
        return CallVerification(
            False, CallProblem.NOT_YET_LOGGED if coming else CallProblem.MISSING_FROM_LOG
        )
    try:
        receipt = await log.receipt(where.index)
        opened = verify_receipt(receipt, VerifierSet(log.keys.verifiers), call_entry(row))
    except (LogCorrupted, TransparencyError):
        return CallVerification(False, CallProblem.LEAF_MODIFIED, where.index)
    return CallVerification(True, None, where.index, opened.checkpoint.size)
