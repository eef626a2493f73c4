"""Edge client: upload media to the edge intake service, with an offline outbox (spec 002)."""

from conclave.edge_client import envelope
from conclave.edge_client.client import EdgeClient, ReceiptLink, SentFile, UploadResult
from conclave.edge_client.daemon import SyncDaemon
from conclave.edge_client.device import DeviceIdentity
from conclave.edge_client.envelope import Envelope
from conclave.edge_client.errors import (
    EdgeClientError,
    InvalidEnvelope,
    OutboxCorrupt,
    ReceiptUnavailable,
    UploadFailed,
)
from conclave.edge_client.kept_receipts import ReceiptCheck
from conclave.edge_client.outbox import Outbox, SyncReport, default_outbox_path
from conclave.edge_client.outbox_records import OutboxItem, StoredReceipt
from conclave.edge_client.retry import RetryPolicy


def __getattr__(name: str) -> object:
    # ``SOURCE_TYPES`` was a fixed tuple of the seven built-in types; SDK code that reads it now
    # gets the registered types, plug-ins' included, from their one home (via the envelope).
    if name == "SOURCE_TYPES":
        return envelope.SOURCE_TYPES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SOURCE_TYPES",
    "DeviceIdentity",
    "EdgeClient",
    "EdgeClientError",
    "Envelope",
    "InvalidEnvelope",
    "Outbox",
    "OutboxCorrupt",
    "OutboxItem",
    "ReceiptCheck",
    "ReceiptLink",
    "ReceiptUnavailable",
    "RetryPolicy",
    "SentFile",
    "StoredReceipt",
    "SyncDaemon",
    "SyncReport",
    "UploadFailed",
    "UploadResult",
    "default_outbox_path",
]
