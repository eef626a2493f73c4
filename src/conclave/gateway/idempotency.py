"""``Idempotency-Key``: a call asked again under the same key is answered with the first call's
recorded outcome (nothing runs twice); the same key for a different request is a conflict."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.gateway import store
from conclave.gateway.outcome import RUNNING, Outcome
from conclave.gateway.records import AuditRow
from conclave.platform.db.engine import store_errors
from conclave.platform.errors import Conflict
from conclave.platform.problem_types import ProblemCode


async def replay(
    engine: AsyncEngine, user_id: str, key: str | None, fingerprint: str | None
) -> Outcome | None:
    """The outcome recorded for ``user_id``'s earlier call under ``key``, or None when there is
    none; 409 when that call was another request (``fingerprint`` differs) or still runs."""
    assert key is not None
    with store_errors():
        earlier = await store.find_by_idempotency_key(engine, user_id, key)
    if earlier is None:
        return None
    if earlier.request_hash != fingerprint:
        raise Conflict(
            "This Idempotency-Key was used for a different request.",
            code=ProblemCode.IDEMPOTENCY_KEY_REUSED,
        )
    if earlier.status == RUNNING:
        raise Conflict(
            "A call with this Idempotency-Key is still running.",
            code=ProblemCode.IDEMPOTENCY_IN_PROGRESS,
        )
    return earlier.outcome(replayed=True)


async def conflicting_key(
    engine: AsyncEngine, user_id: str, key: str | None, fingerprint: str | None
) -> Outcome:
    """The answer to a call that lost the race to record itself under ``key``: the winner's."""
    winner = await replay(engine, user_id, key, fingerprint)
    if winner is None:  # the winner's row vanished: only possible if someone deleted it
        raise Conflict("Idempotency-Key conflict.", code=ProblemCode.IDEMPOTENCY_IN_PROGRESS)
    return winner


async def recorded_already(engine: AsyncEngine, row: AuditRow) -> bool:
    """Whether the finished row of this call is stored already: a retry after a lost
    acknowledgement (the connection failed after the commit) meets its own earlier write. The
    call's id is its own, so a stored row of that id and outcome is this call's."""
    with store_errors():
        stored = await store.get_call(engine, row.conclave_id)
    return stored is not None and stored.status == row.status
