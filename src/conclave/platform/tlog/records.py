"""The typed records the stored transparency logs hand out."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from conclave.platform.db.batch import Insert
from conclave.platform.transparency.checkpoint import Checkpoint


@dataclass(frozen=True, slots=True)
class LogState:
    """A row of ``tlog_logs``: a log's identity, sizes and root."""

    log_id: int
    name: str
    origin: str
    sequenced_size: int
    """Leaves given an index (committed)."""
    integrated_size: int
    """Leaves in the tree: the size of the latest checkpoint."""
    root_hash: bytes
    """The root of the tree of ``integrated_size`` leaves."""
    integrated_at: datetime
    """When the latest checkpoint was made."""
    created_at: datetime


@dataclass(frozen=True, slots=True)
class StoredLeaf:
    """A leaf as stored: its index, its data and its RFC 9162 leaf hash."""

    index: int
    data: bytes
    leaf_hash: bytes


@dataclass(frozen=True, slots=True)
class QueuedLeaf:
    """A leaf queued in its writer's transaction: the write, and the leaf hash to find it by."""

    write: Insert
    leaf_hash: bytes


@dataclass(frozen=True, slots=True)
class LeafLocation:
    """Where a leaf of a given hash is in a log."""

    index: int | None = None
    """The smallest index of a leaf of that hash (None: none is sequenced; a queued leaf gets
    its index in the integration pass that signs the checkpoint covering it)."""
    integrated: bool = False
    """Whether that leaf is under the latest checkpoint (else under the next one)."""


class IntegrationOutcome(StrEnum):
    """What one integration pass did."""

    INTEGRATED = "integrated"
    """New leaves are in the tree and a new checkpoint is signed."""
    UP_TO_DATE = "up_to_date"
    """Every sequenced leaf was already integrated: nothing was signed (queued rows that hold
    no leaf may have been dropped; ``pending`` then says whether more wait)."""
    TOO_SOON = "too_soon"
    """Leaves wait, but the latest checkpoint is younger than the checkpoint interval."""
    BUSY = "busy"
    """Another integrator (another process or replica) holds the log's integration lock."""


@dataclass(frozen=True, slots=True)
class Integration:
    """The result of :meth:`TransparencyLog.integrate`."""

    outcome: IntegrationOutcome
    checkpoint: Checkpoint | None = None
    """The new checkpoint (``INTEGRATED`` only)."""
    note: str | None = None
    """Its signed note, as stored and published (``INTEGRATED`` only)."""
    pending: int = 0
    """Leaves still waiting after this pass (known unless ``BUSY``): every sequenced one, and
    queued ones counted up to one pass's worth (more than 0 says another pass is due)."""
    wait_seconds: float = 0.0
    """How long until the next checkpoint is allowed (``TOO_SOON`` only)."""
