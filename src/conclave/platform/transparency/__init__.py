"""The verifiable core of Conclave's transparency logs, with no storage and no HTTP.

- RFC 9162 tree hashing, roots and proofs from stored complete subtrees
  (:mod:`~conclave.platform.transparency.hashing`, :mod:`.subtrees`, :mod:`.proofs`), their
  verification (:mod:`.verify`), and the append frontier a batch writer folds leaves into
  (:mod:`.frontier`); an in-memory hash source (:mod:`.memory`).
- C2SP signed notes with Ed25519 keys in Go's text forms (:mod:`.note`, :mod:`.note_keys`) and
  C2SP checkpoints (:mod:`.checkpoint`).

Everything here is pure computation, so the offline verifier and the SDK use the same code as the
services. ``docs/transparency.md`` describes the formats.
"""

from conclave.platform.transparency.checkpoint import (
    Checkpoint,
    SignedCheckpoint,
    open_checkpoint,
    sign_checkpoint,
    verify_extension,
)
from conclave.platform.transparency.errors import (
    ClaimUnprovable,
    InvalidSignature,
    MalformedCheckpoint,
    MalformedInput,
    MalformedKey,
    MalformedNote,
    MalformedProof,
    OutOfRange,
    RootMismatch,
    SubtreeNotStored,
    TransparencyError,
    UnexpectedOrigin,
    UnverifiedNote,
    VerificationFailed,
)
from conclave.platform.transparency.frontier import AppendedBatch, AppendFrontier
from conclave.platform.transparency.hashing import EMPTY_ROOT, HASH_SIZE, leaf_hash, node_hash
from conclave.platform.transparency.memory import InMemoryHashSource
from conclave.platform.transparency.note import VerifierSet, open_note, sign_note
from conclave.platform.transparency.note_keys import NoteSigner, NoteVerifier, generate_key
from conclave.platform.transparency.proofs import (
    consistency_plan,
    consistency_proof,
    inclusion_plan,
    inclusion_proof,
    root_plan,
    tree_root,
)
from conclave.platform.transparency.receipt import (
    ConsistencyBundle,
    LeafMismatch,
    Receipt,
    verify_consistency_bundle,
    verify_receipt,
)
from conclave.platform.transparency.records import Note, NoteSignature
from conclave.platform.transparency.subtrees import HashSource, ProofPlan, Subtree, SubtreeHash
from conclave.platform.transparency.verify import verify_consistency, verify_inclusion

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "AppendFrontier",
    "AppendedBatch",
    "Checkpoint",
    "ClaimUnprovable",
    "ConsistencyBundle",
    "HashSource",
    "InMemoryHashSource",
    "InvalidSignature",
    "LeafMismatch",
    "MalformedCheckpoint",
    "MalformedInput",
    "MalformedKey",
    "MalformedNote",
    "MalformedProof",
    "Note",
    "NoteSignature",
    "NoteSigner",
    "NoteVerifier",
    "OutOfRange",
    "ProofPlan",
    "Receipt",
    "RootMismatch",
    "SignedCheckpoint",
    "Subtree",
    "SubtreeHash",
    "SubtreeNotStored",
    "TransparencyError",
    "UnexpectedOrigin",
    "UnverifiedNote",
    "VerificationFailed",
    "VerifierSet",
    "consistency_plan",
    "consistency_proof",
    "generate_key",
    "inclusion_plan",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "open_checkpoint",
    "open_note",
    "root_plan",
    "sign_checkpoint",
    "sign_note",
    "tree_root",
    "verify_consistency",
    "verify_consistency_bundle",
    "verify_extension",
    "verify_inclusion",
    "verify_receipt",
]
