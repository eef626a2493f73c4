"""The JSON shapes of the transparency log endpoints (:mod:`conclave.platform.tlog.api`).

Hashes and leaf data are standard base64; receipts and consistency bundles are the documents of
:mod:`conclave.platform.transparency.receipt`, which the offline verifier reads."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class LogList(BaseModel):
    """The transparency logs this service publishes."""

    logs: list[str] = Field(description="Log names; each is served under /logs/{name}.")


class LogKey(BaseModel):
    """A verifier key of a log."""

    vkey: str = Field(description="The verifier key, '<origin>+<key id>+<base64 key>' (C2SP).")
    status: Literal["current", "retired"] = Field(
        description="'current' signs new checkpoints; 'retired' signed older ones only."
    )


class LogKeys(BaseModel):
    """A log's origin and its verifier keys: all a reader needs to check its checkpoints."""

    origin: str
    keys: list[LogKey]


class LeafRead(BaseModel):
    """An integrated leaf: its entry's bytes and RFC 9162 leaf hash."""

    index: int
    leaf_hash: str = Field(description="base64 of SHA-256(0x00 || data).")
    data: str = Field(description="base64 of the leaf's entry.")


class InclusionProofRead(BaseModel):
    """An RFC 9162 inclusion proof (PATH), bottom-up."""

    index: int
    size: int
    inclusion_proof: list[str] = Field(description="base64 hashes.")


class ConsistencyProofRead(BaseModel):
    """An RFC 9162 consistency proof (PROOF) between two tree sizes."""

    model_config = ConfigDict(populate_by_name=True)

    from_size: int = Field(alias="from")
    to_size: int = Field(alias="to")
    proof: list[str] = Field(description="base64 hashes (empty from the empty tree).")


class ReceiptRead(BaseModel):
    """A receipt (``conclave.receipt/v1``): a leaf under a signed checkpoint, with its proof."""

    format: Literal["conclave.receipt/v1"]
    origin: str
    index: int
    leaf_hash: str
    checkpoint: str = Field(description="The signed checkpoint (C2SP note text).")
    inclusion_proof: list[str]


class ConsistencyBundleRead(BaseModel):
    """Two signed checkpoints and the proof that the newer extends the older
    (``conclave.consistency/v1``)."""

    format: Literal["conclave.consistency/v1"]
    old: str
    new: str
    proof: list[str]
