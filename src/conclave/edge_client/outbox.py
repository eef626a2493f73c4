"""``Outbox``: uploads queued on the device, sent when the server can be reached.

States follow spec 002: enqueue → ``PENDING`` (attempts 0); accepted → ``SENT`` (evidence ids
kept); local file missing or an error answer → ``FAILED`` (attempts + 1, error kept); cleanup
removes ``SENT``. A transient failure (network, time-out, 408/425/429, 5xx) leaves the item
``FAILED`` with a ``next_attempt_at`` from :class:`RetryPolicy`, and the first sync after that time
takes it back to ``PENDING`` and sends it again; any other failure waits for :meth:`Outbox.retry`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Literal

import platformdirs

from conclave.edge_client.client import EdgeClient, UploadResult
from conclave.edge_client.device import DeviceIdentity
from conclave.edge_client.envelope import Envelope, utc_timestamp
from conclave.edge_client.errors import InvalidEnvelope, ReceiptUnavailable, UploadFailed
from conclave.edge_client.kept_receipts import (
    ReceiptCheck,
    ReceiptCollector,
    check_kept,
    check_uploads,
)
from conclave.edge_client.outbox_records import OutboxItem, StoredReceipt
from conclave.edge_client.receipts import check_receipt, verifier_keys
from conclave.edge_client.retry import RetryPolicy
from conclave.edge_client.store import OutboxStore
from conclave.platform.transparency.errors import TransparencyError
from conclave.platform.transparency.note import VerifierSet

Outcome = Literal["sent", "retrying", "failed", "unsent"]


def default_outbox_path() -> Path:
    """``edge-outbox.sqlite3`` in the user's data directory (platform specific)."""
    return platformdirs.user_data_path("conclave", appauthor=False) / "edge-outbox.sqlite3"


@dataclass
class SyncReport:
    """What one sync run did. ``stopped`` says why it ended early (server unreachable)."""

    sent: list[int] = field(default_factory=list)
    retrying: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    duplicates: int = 0
    stopped: str | None = None
    receipts: int = 0
    """Distinct packs sent in this run whose receipt and log entry were fetched and kept, as
    this run's uploads' own, before the run ended."""

    @property
    def attempted(self) -> int:
        """Items sent or tried in this run."""
        return len(self.sent) + len(self.retrying) + len(self.failed)


class Outbox:
    """The offline queue of one device, in a SQLite file (``path``, or the user data directory).

    Local operations are synchronous (short SQLite transactions); :meth:`sync` is a coroutine.
    Not thread-safe: open one ``Outbox`` per thread or process (they may share the file).
    ``clock`` (Unix seconds) and ``retry_policy`` are there for tests and tuning;
    ``receipt_wait_seconds`` is how long a sync run keeps asking for a sent pack's receipt
    (:mod:`conclave.edge_client.kept_receipts`).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        retry_policy: RetryPolicy | None = None,
        lease_seconds: float = 120.0,
        clock: Callable[[], float] = time.time,
        receipt_wait_seconds: float = 5.0,
    ) -> None:
        self.path = Path(path) if path is not None else default_outbox_path()
        self.retry_policy = retry_policy or RetryPolicy()
        self.lease_seconds = lease_seconds
        self.receipt_wait_seconds = receipt_wait_seconds
        self._clock = clock
        self._store = OutboxStore.open(self.path, utc_timestamp())
        self.device: DeviceIdentity = self._store.device()

    def __enter__(self) -> Outbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the database."""
        self._store.close()

    def enqueue(self, envelope: Envelope, *, sampling_policy_ref: str | None = None) -> OutboxItem:
        """Queue one upload as ``PENDING`` (attempts 0); :class:`InvalidEnvelope` stores nothing."""
        return self.enqueue_many([envelope], sampling_policy_ref=sampling_policy_ref)[0]

    def enqueue_many(
        self, envelopes: Sequence[Envelope], *, sampling_policy_ref: str | None = None
    ) -> list[OutboxItem]:
        """Queue several uploads in one transaction: all are checked first, then all or none are
        stored. Each gets its own idempotency key, and ``metadata.device_id`` is set to this
        device's id unless the envelope names one."""
        rows = []
        for envelope in envelopes:
            envelope.validate()
            metadata = {"device_id": self.device.device_id, **envelope.metadata}
            rows.append(
                {
                    "idempotency_key": str(uuid.uuid4()),
                    "source_type": envelope.source_type,
                    "source_uri": envelope.source_uri,
                    "metadata": json.dumps(metadata, allow_nan=False),
                    "correlation_id": envelope.correlation_id,
                    "sampling_policy_ref": sampling_policy_ref,
                    "created_utc": envelope.created_utc,
                    "now": self._clock(),
                }
            )
        ids = self._store.insert(rows)
        now = self._clock()
        return [item for item_id in ids if (item := self._store.get(item_id, now))]

    def get(self, item_id: int) -> OutboxItem | None:
        """One item, or None."""
        return self._store.get(item_id, self._clock())

    def pending(self, limit: int | None = None) -> list[OutboxItem]:
        """``PENDING`` items, oldest first."""
        return self._store.items("PENDING", self._clock(), limit)

    def failed(self, limit: int | None = None) -> list[OutboxItem]:
        """``FAILED`` items, oldest first (``auto_retry`` tells the transient ones)."""
        return self._store.items("FAILED", self._clock(), limit)

    def sent(self, limit: int | None = None) -> list[OutboxItem]:
        """``SENT`` items with their evidence ids, oldest first."""
        return self._store.items("SENT", self._clock(), limit)

    def last_errors(self, limit: int = 5) -> list[OutboxItem]:
        """The most recently failed items."""
        return self._store.items("FAILED", self._clock(), limit, newest_first=True)

    def counts(self) -> dict[str, int]:
        """Items per state, plus ``retrying`` (FAILED, will retry by itself) and ``sending``."""
        return self._store.counts(self._clock())

    def retry(self, ids: Iterable[int] | Literal["all"]) -> int:
        """Put ``FAILED`` items (these ids, or ``"all"``) back to ``PENDING``, due now; the
        attempts counter is kept. Return how many moved."""
        chosen = None if isinstance(ids, str) else list(ids)
        return self._store.requeue(chosen, self._clock())

    def cleanup(self) -> int:
        """Remove ``SENT`` items (their receipts are kept); return how many."""
        return self._store.delete_sent()

    def receipts(self, *, missing_only: bool = False) -> list[StoredReceipt]:
        """The receipts of the packs this device sent, by item: each fetched one's
        ``conclave.receipt/v1`` document and the log's entry of its pack, or ``None`` while not
        fetched yet, with what the device sent (``missing_only``: those lacking either)."""
        return self._store.receipts(missing_only=missing_only)

    async def fetch_receipts(
        self,
        client: EdgeClient,
        *,
        wait_seconds: float | None = None,
        keys: str | list[str] | VerifierSet | None = None,
    ) -> int:
        """Ask the server again for every receipt, and every pack's log entry, not kept yet, each
        pack's for at most ``wait_seconds`` (default ``receipt_wait_seconds``); how many packs
        now have both kept.

        With the log's verifier ``keys`` (default: those the server publishes, when it answers),
        a kept receipt they do not verify is asked for again too, and a fetched one they do not
        verify is not kept: one tampered answer does not stand in for the real receipt for
        good."""
        wait = self.receipt_wait_seconds if wait_seconds is None else wait_seconds
        kept = self._store.receipts()
        verifiers = await self._verifiers(client, keys, kept)
        wanted = [due for found in kept if (due := _to_fetch(found, verifiers)) is not None]
        collector = ReceiptCollector(
            client, self._store, wait_seconds=wait, clock=self._clock, verifiers=verifiers
        )
        collector.collect(wanted)
        try:
            return await collector.finish()
        finally:
            self._store.flush()

    @staticmethod
    async def _verifiers(
        client: EdgeClient,
        keys: str | list[str] | VerifierSet | None,
        kept: Sequence[StoredReceipt],
    ) -> VerifierSet | None:
        if isinstance(keys, VerifierSet):
            return keys
        if keys is not None:
            return verifier_keys(keys)
        logs = sorted({found.receipt_path.split("/")[2] for found in kept if found.receipt})
        try:
            return verifier_keys([await client.log_keys(log) for log in logs]) if logs else None
        except (ReceiptUnavailable, TransparencyError):
            return None  # the server does not say: the kept receipts are left as they are

    def check_receipts(self, keys: str | list[str] | VerifierSet) -> list[ReceiptCheck]:
        """Check every kept receipt on the device with the log's verifier keys (key texts, or
        the JSON of ``GET /logs/packs/keys``), and the log's entry of its pack against what the
        device sent; then every upload sent: one whose answer gave it no receipt of its own
        (no link, or another upload's pack) is listed ``missing`` or ``invalid``
        (:func:`check_uploads`). No server is asked. :class:`MalformedInput` for keys of the
        wrong shape. Sorted by item."""
        verifiers = keys if isinstance(keys, VerifierSet) else verifier_keys(keys)
        kept = self._store.receipts()
        checks = [check_kept(found, verifiers) for found in kept]
        checks += check_uploads(self._store.sent_uploads(), kept)
        return sorted(checks, key=lambda check: check.item_id)

    async def sync(
        self,
        client: EdgeClient,
        *,
        concurrency: int = 1,
        on_item: Callable[[OutboxItem, Outcome], None] | None = None,
        receipts: bool = True,
    ) -> SyncReport:
        """Send every item due now, ``concurrency`` at a time; then, with ``receipts``, fetch and
        keep the receipts of the packs this run sent; return what happened.

        Safe to run in several processes at once: each item is claimed before it is sent. A
        connection failure, time-out, 429 or 502-504 ends the run early (the server as a whole is
        unavailable; the rest would fail the same way), leaving untried items untouched.

        Receipts are asked for once the items are sent, not while they go out: a pack's receipt
        exists about a second after its upload, and asking during the uploads cost the server a
        request (mostly a 404) per poll per pack, and the run its uploads' speed (0.58 of direct
        sends in ``bench/edge_client.py``). Without ``receipts`` they stay missing in the outbox
        until :meth:`fetch_receipts` (or the next run with ``receipts``) asks for them.
        """
        runner = uuid.uuid4().hex
        started = self._clock()
        report = SyncReport()
        seen: set[int] = set()
        sent: list[StoredReceipt] = []
        collector = ReceiptCollector(
            client, self._store, wait_seconds=self.receipt_wait_seconds, clock=self._clock
        )

        async def worker() -> None:
            while report.stopped is None:
                now = self._clock()
                item = self._store.claim(runner, now, started, now + self.lease_seconds)
                if item is None:
                    return
                if item.id in seen:
                    # Only with a zero retry delay: each run tries an item once.
                    self._store.release(item.id, runner)
                    return
                seen.add(item.id)
                outcome = await self._send_claimed(client, item, runner, report, sent)
                if on_item is not None:
                    on_item(item, outcome)

        try:
            await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
            if receipts and sent:
                collector.collect(sent)
                report.receipts = await collector.finish()
        finally:
            collector.cancel()
            # Claims and outcomes are committed without an fsync each (see store.py): one for
            # the whole run, so a finished run's SENT and FAILED survive a power cut.
            self._store.flush()
        return report

    def due_count(self) -> int:
        """How many items a sync started now would try (for a progress bar's total)."""
        return self._store.due_count(self._clock())

    async def _send_claimed(
        self,
        client: EdgeClient,
        item: OutboxItem,
        runner: str,
        report: SyncReport,
        sent: list[StoredReceipt],
    ) -> Outcome:
        heartbeat = asyncio.create_task(self._keep_lease(item.id, runner))
        try:
            result = await self._upload(client, item)
        except UploadFailed as exc:
            now = self._clock()
            retry_at = None
            if exc.transient:
                retry_at = now + self.retry_policy.delay(item.attempts + 1, exc.retry_after)
                if exc.server_unavailable:
                    report.stopped = str(exc)
            self._store.mark_failed(item.id, runner, str(exc), retry_at=retry_at, now=now)
            (report.retrying if exc.transient else report.failed).append(item.id)
            return "retrying" if exc.transient else "failed"
        except BaseException:
            # Cancelled or a bug: hand the item back so the next run sends it without waiting
            # for the lease (the idempotency key makes that safe even if this send got through).
            self._store.release(item.id, runner)
            raise
        finally:
            heartbeat.cancel()
        links = _receipts_to_keep(client, item, result)
        packs_sent = result.evidence_ids[: len(result.files)]
        kept = self._store.mark_sent(item.id, result.evidence_ids, self._clock(), links, packs_sent)
        sent.extend(kept)  # the item is SENT already: nothing waits for its receipt
        report.sent.append(item.id)
        report.duplicates += result.status == "duplicate"
        return "sent"

    @staticmethod
    async def _upload(client: EdgeClient, item: OutboxItem) -> UploadResult:
        envelope = item.envelope
        try:
            path = envelope.path
            if not path.is_file():
                raise UploadFailed(f"Local file missing: {path}", transient=False)
            return await client.upload(
                envelope.source_type,
                path,
                metadata=envelope.metadata,
                correlation_id=envelope.correlation_id,
                sampling_policy_ref=item.sampling_policy_ref,
                idempotency_key=item.idempotency_key,
            )
        except InvalidEnvelope as exc:
            # Checked at enqueue; only an outbox written by hand or an older client gets here.
            raise UploadFailed(str(exc), transient=False) from exc

    async def _keep_lease(self, item_id: int, runner: str) -> None:
        # A long upload (a video over a slow link) must not lose its claim to another run.
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            self._store.renew(item_id, runner, self._clock() + self.lease_seconds)


def _to_fetch(kept: StoredReceipt, verifiers: VerifierSet | None) -> StoredReceipt | None:
    """``kept`` as still to fetch (a receipt the keys do not verify dropped), or ``None``."""
    if kept.receipt is not None and verifiers is not None:
        try:
            check_receipt(kept.receipt, verifiers)
        except TransparencyError:
            return replace(kept, receipt=None, entry=None)
    return kept if kept.entry is None else None


def _receipts_to_keep(
    client: EdgeClient, item: OutboxItem, result: UploadResult
) -> list[StoredReceipt]:
    """The receipt links of an accepted upload, each with what the log's entry of its pack must
    name: the bytes sent of the file at the pack's position in the answer (the server answers
    the packs in the upload's order), this device's id as the server names it, and the upload's
    idempotency key. At most one link per file sent: an answer naming more packs than files
    (thousands, from a hostile server) keeps only those of the files' positions."""
    device = client.device_named(item.envelope.metadata)
    key = hashlib.sha256(item.idempotency_key.encode("utf-8", "surrogatepass")).hexdigest()
    positions: dict[str, int] = {}
    for position, evidence_id in enumerate(result.evidence_ids[: len(result.files)]):
        positions.setdefault(evidence_id, position)
    kept = []
    for link in result.receipts:
        position = positions.pop(link.evidence_id, -1)
        if position < 0:
            continue
        sent = result.files[position]
        kept.append(
            StoredReceipt(
                link.evidence_id,
                item.id,
                link.log_leaf_hash,
                link.path,
                None,
                None,
                part_index=position,
                sent_sha256=sent.sha256,
                sent_size=sent.size_bytes,
                device_id=device,
                idempotency_key_sha256=key,
            )
        )
    return kept
