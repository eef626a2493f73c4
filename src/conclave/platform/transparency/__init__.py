"""The verifiable core of Conclave's transparency logs, with no storage and no HTTP.

- RFC 9162 tree hashing, roots and proofs from stored complete subtrees
  (:mod:`~conclave.platform.transparency.hashing`, :mod:`.subtrees`, :mod:`.proofs`), their
  verification (:mod:`.verify`), and the append frontier a batch writer folds leaves into
  (:mod:`.frontier`); an in-memory hash source (:mod:`.memory`).

Everything here is pure computation, so the offline verifier and the SDK use the same code as the
services. ``docs/transparency.md`` describes the formats.
"""

from conclave.platform.transparency.errors import (
    MalformedInput,
    MalformedProof,
    OutOfRange,
    RootMismatch,
    SubtreeNotStored,
    TransparencyError,
    VerificationFailed,
)
from conclave.platform.transparency.frontier import AppendedBatch, AppendFrontier
from conclave.platform.transparency.hashing import EMPTY_ROOT, HASH_SIZE, leaf_hash, node_hash
from conclave.platform.transparency.memory import InMemoryHashSource
from conclave.platform.transparency.proofs import (
    consistency_plan,
    consistency_proof,
    inclusion_plan,
    inclusion_proof,
    root_plan,
    tree_root,
)
from conclave.platform.transparency.subtrees import HashSource, ProofPlan, Subtree, SubtreeHash
from conclave.platform.transparency.verify import verify_consistency, verify_inclusion

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "AppendFrontier",
    "AppendedBatch",
    "HashSource",
    "InMemoryHashSource",
    "MalformedInput",
    "MalformedProof",
    "OutOfRange",
    "ProofPlan",
    "RootMismatch",
    "Subtree",
    "SubtreeHash",
    "SubtreeNotStored",
    "TransparencyError",
    "VerificationFailed",
    "consistency_plan",
    "consistency_proof",
    "inclusion_plan",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root_plan",
    "tree_root",
    "verify_consistency",
    "verify_inclusion",
]
