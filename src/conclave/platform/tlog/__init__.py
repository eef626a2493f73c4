"""Transparency logs on the platform's store (SQLite or PostgreSQL): named logs whose leaves are
appended in batches by any number of writers and replicas, integrated into an RFC 9162 tree of
stored complete subtrees, and published as signed C2SP checkpoints, with proofs read in one
statement each. Built on :mod:`conclave.platform.transparency`; ``docs/transparency.md`` describes
the storage, the order of leaves, the checkpoints' cadence and the keys.
"""

from conclave.platform.tlog.audit import Finding, FindingKind, LogAudit, audit_log
from conclave.platform.tlog.errors import (
    BeyondIntegrated,
    CheckpointNotFound,
    LeafTooLarge,
    LogCorrupted,
    LogKeyError,
)
from conclave.platform.tlog.integrator import LogIntegrator
from conclave.platform.tlog.keys import LogKeys, check_log_name, log_keys, log_origin
from conclave.platform.tlog.log import TransparencyLog
from conclave.platform.tlog.records import (
    Integration,
    IntegrationOutcome,
    LeafLocation,
    LogState,
    QueuedLeaf,
    StoredLeaf,
)
from conclave.platform.tlog.serving import open_log

__all__ = [
    "BeyondIntegrated",
    "CheckpointNotFound",
    "Finding",
    "FindingKind",
    "Integration",
    "IntegrationOutcome",
    "LeafLocation",
    "LeafTooLarge",
    "LogAudit",
    "LogCorrupted",
    "LogIntegrator",
    "LogKeyError",
    "LogKeys",
    "LogState",
    "QueuedLeaf",
    "StoredLeaf",
    "TransparencyLog",
    "audit_log",
    "check_log_name",
    "log_keys",
    "log_origin",
    "open_log",
]
