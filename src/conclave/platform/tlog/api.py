"""The HTTP endpoints of the transparency logs a service publishes, mounted by any service that
keeps logs (``app.include_router(tlog_router)`` with a :class:`PublishedLogs` on
``app.state.tlogs``).

Who may read what: a log exists so that outsiders can check it, so its checkpoints, keys, proofs
and receipts are public (no credentials: they reveal hashes and sizes only). A leaf's data is the
entry itself, so it is served to authenticated callers only.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import PlainTextResponse

from conclave.platform.http import CurrentPrincipal
from conclave.platform.openapi import problem_responses
from conclave.platform.tlog.models import (
    ConsistencyBundleRead,
    ConsistencyProofRead,
    InclusionProofRead,
    LeafRead,
    LogKey,
    LogKeys,
    LogList,
    ReceiptRead,
)
from conclave.platform.tlog.published import PublishedLogs, leaf_hash_of_hex
from conclave.platform.transparency import base64text

tlog_router = APIRouter(prefix="/logs", tags=["transparency"])

# Indices and sizes in their one decimal spelling: FastAPI's int also takes "+1", "01", "1_0" and
# " 1", and a checkpoint served as immutable under a second URL is a second cache entry.
_DECIMAL = r"^(0|-?[1-9][0-9]*)$"
_FAR_BEYOND = 2**64
"""What a number of more digits than any uint64 stands for: the log refuses it by its range,
without converting thousands of digits (Python refuses past 4,300)."""


def _number(text: str) -> int:
    if len(text) <= 21:
        return int(text)
    return -_FAR_BEYOND if text.startswith("-") else _FAR_BEYOND


PathNumber = Annotated[str, Path(pattern=_DECIMAL)]

# A checkpoint of a given size never changes once signed; the latest one changes at most once a
# checkpoint interval.
_IMMUTABLE = "public, max-age=31536000, immutable"
_LATEST = "no-cache"
_NOTE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/plain": {"schema": {"type": "string"}}}}
}


async def _published(request: Request) -> PublishedLogs:
    logs = getattr(request.app.state, "tlogs", None)
    return logs if isinstance(logs, PublishedLogs) else PublishedLogs()


Logs = Annotated[PublishedLogs, Depends(_published)]


def _note(text: str, cache: str) -> PlainTextResponse:
    return PlainTextResponse(
        text, media_type="text/plain; charset=utf-8", headers={"Cache-Control": cache}
    )


def _b64(hashes: list[bytes] | tuple[bytes, ...]) -> list[str]:
    return [base64text.encode(item) for item in hashes]


@tlog_router.get("", response_model=LogList)
async def list_logs(logs: Logs) -> LogList:
    """The transparency logs this service publishes."""
    return LogList(logs=logs.names())


@tlog_router.get("/{name}/checkpoint", response_class=PlainTextResponse, responses=_NOTE)
async def latest_checkpoint(name: str, logs: Logs) -> PlainTextResponse:
    """The log's latest signed checkpoint (C2SP tlog-checkpoint note)."""
    return _note(await logs.latest_checkpoint(name), _LATEST)


@tlog_router.get(
    "/{name}/checkpoint/{size}",
    response_class=PlainTextResponse,
    responses={**_NOTE, **problem_responses(422)},
)
async def checkpoint(name: str, size: PathNumber, logs: Logs) -> PlainTextResponse:
    """The log's signed checkpoint of a tree size it signed."""
    return _note(await logs.checkpoint(name, _number(size)), _IMMUTABLE)


@tlog_router.get("/{name}/keys", response_model=LogKeys)
async def keys(name: str, logs: Logs) -> LogKeys:
    """The log's verifier keys: current ones first, then retired ones."""
    log = logs.get_log_or_404(name)
    current = {signer.verifier.vkey for signer in log.keys.signers}
    return LogKeys(
        origin=log.origin,
        keys=[
            LogKey(vkey=vkey, status="current" if vkey in current else "retired")
            for vkey in log.keys.vkeys()
        ],
    )


@tlog_router.get(
    "/{name}/leaves/{index}", response_model=LeafRead, responses=problem_responses(403, 422)
)
async def leaf(name: str, index: PathNumber, logs: Logs, principal: CurrentPrincipal) -> LeafRead:
    """An integrated leaf's data and leaf hash: for operators, and for whoever the log's leaf
    policy names (the gateway's calls log: the caller whose call it is)."""
    found = await logs.leaf(name, _number(index), principal)
    return LeafRead(
        index=found.index,
        leaf_hash=base64text.encode(found.leaf_hash),
        data=base64text.encode(found.data),
    )


@tlog_router.get(
    "/{name}/proof/inclusion", response_model=InclusionProofRead, responses=problem_responses(422)
)
async def inclusion_proof(
    name: str,
    logs: Logs,
    index: Annotated[str, Query(pattern=_DECIMAL)],
    size: Annotated[str, Query(pattern=_DECIMAL)],
) -> InclusionProofRead:
    """The RFC 9162 inclusion proof of a leaf in the tree of a size."""
    leaf_index, tree_size = _number(index), _number(size)
    proof = await logs.inclusion_proof(name, leaf_index, tree_size)
    return InclusionProofRead(index=leaf_index, size=tree_size, inclusion_proof=_b64(proof))


@tlog_router.get(
    "/{name}/proof/consistency",
    response_model=ConsistencyProofRead | ConsistencyBundleRead,
    responses=problem_responses(422),
)
async def consistency_proof(
    name: str,
    logs: Logs,
    from_text: Annotated[str, Query(alias="from", pattern=_DECIMAL)],
    to_text: Annotated[str, Query(alias="to", pattern=_DECIMAL)],
    checkpoints: Annotated[bool, Query()] = False,
) -> ConsistencyProofRead | ConsistencyBundleRead:
    """The RFC 9162 consistency proof between two tree sizes; with ``checkpoints=true``, the
    consistency bundle of both signed checkpoints and the proof."""
    from_size, to_size = _number(from_text), _number(to_text)
    if checkpoints:
        bundle = await logs.consistency_bundle(name, from_size, to_size)
        return ConsistencyBundleRead.model_validate(bundle.to_json())
    proof = await logs.consistency_proof(name, from_size, to_size)
    return ConsistencyProofRead(from_size=from_size, to_size=to_size, proof=_b64(proof))


@tlog_router.get(
    "/{name}/receipt/{index}", response_model=ReceiptRead, responses=problem_responses(422)
)
async def receipt(name: str, index: PathNumber, logs: Logs) -> ReceiptRead:
    """A receipt of a leaf against the latest checkpoint (404 ``BEYOND_LOG`` until it is signed)."""
    return ReceiptRead.model_validate((await logs.receipt(name, _number(index))).to_json())


@tlog_router.get(
    "/{name}/receipt/by-hash/{leaf_hash}",
    response_model=ReceiptRead,
    responses=problem_responses(422),
)
async def receipt_by_hash(name: str, leaf_hash: str, logs: Logs) -> ReceiptRead:
    """A receipt of the first leaf of this leaf hash (64 hexadecimal digits) against the latest
    checkpoint: how the answer of a queued append (a tool call, an upload) links to its receipt
    before its index is known. 404 ``BEYOND_LOG`` until the checkpoint covering it is signed."""
    hashed = leaf_hash_of_hex(leaf_hash)
    return ReceiptRead.model_validate((await logs.receipt_by_hash(name, hashed)).to_json())
