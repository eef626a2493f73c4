"""The receipts of what the device sent: fetched from the server and kept beside the outbox's
records, then checked on the device against the log's verifier keys.

A receipt exists once the server signs the checkpoint covering the pack's leaf, about a second
after the upload: until then the server answers 404 ``LEAF_NOT_FOUND`` (or ``BEYOND_LOG``), and the
collector asks again with a short backoff, for at most ``wait_seconds`` per pack. It runs beside a
sync run's uploads and never holds an item: the item is ``SENT`` before its receipt is asked for,
and a receipt not fetched in time (server slow, gone, a link it refuses) stays missing in the
outbox until :meth:`conclave.edge_client.Outbox.fetch_receipts` asks again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from conclave.edge_client.client import EdgeClient
from conclave.edge_client.errors import ReceiptUnavailable, ServerUnreachable
from conclave.edge_client.receipts import check_receipt
from conclave.edge_client.store import OutboxStore, StoredReceipt
from conclave.platform.transparency.errors import TransparencyError
from conclave.platform.transparency.note import VerifierSet
from conclave.platform.transparency.receipt import Receipt

FIRST_DELAY = 0.25
"""Seconds between two rounds of asking for the receipts not signed yet; doubled after each
round, at most :data:`MAX_DELAY`."""
MAX_DELAY = 1.0


class ReceiptCollector:
    """Fetches receipts in the background and keeps them in the outbox: one task asks for every
    receipt still wanted in turn (one request at a time, whatever the number of items sent),
    each until it is kept or its own deadline passed; :meth:`finish` waits for that."""

    def __init__(
        self,
        client: EdgeClient,
        store: OutboxStore,
        *,
        wait_seconds: float,
        clock: Callable[[], float],
    ) -> None:
        self._client = client
        self._store = store
        self._wait = wait_seconds
        self._clock = clock
        self._wanted: list[tuple[StoredReceipt, float]] = []
        self._task: asyncio.Task[None] | None = None
        self.kept = 0
        """Receipts fetched and kept so far."""

    def collect(self, receipts: Sequence[StoredReceipt]) -> None:
        """Ask for these receipts from now on, each for at most ``wait_seconds``."""
        deadline = asyncio.get_running_loop().time() + self._wait
        self._wanted += [(receipt, deadline) for receipt in receipts]
        if self._wanted and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._run())

    async def finish(self) -> int:
        """Wait until every receipt asked for is kept or out of time; how many were kept."""
        while self._task is not None and not self._task.done():
            # A receipt is never worth failing the sync run for: what was not kept is asked
            # for again later.
            with contextlib.suppress(Exception):
                await self._task
        return self.kept

    def cancel(self) -> None:
        """Stop asking (the receipts not kept stay missing in the outbox)."""
        if self._task is not None:
            self._task.cancel()
        self._wanted = []

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = FIRST_DELAY
        while self._wanted:
            for wanted in list(self._wanted):
                receipt, deadline = wanted
                if loop.time() >= deadline:
                    self._wanted.remove(wanted)
                    continue
                kept = False
                try:
                    # No request outlives its receipt's deadline: a server that stalls cannot
                    # hold the run for a time-out per receipt.
                    async with asyncio.timeout_at(deadline):
                        kept = await self._fetch(receipt)
                except (ServerUnreachable, TimeoutError):
                    self._wanted = []  # the next receipts would wait the same way: ask later
                    return
                if kept or loop.time() >= deadline:
                    self._wanted.remove(wanted)
            if self._wanted:
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_DELAY)

    async def _fetch(self, receipt: StoredReceipt) -> bool:
        """Ask once; whether the receipt is now kept. Only a receipt of the leaf the upload's
        answer named is kept: anything else answered in its place (a proxy's page, another
        leaf's receipt) stays missing, and is asked for again later."""
        try:
            found = await self._client.receipt(receipt.receipt_path)
        except ServerUnreachable:
            raise
        except ReceiptUnavailable:
            return False
        if found is None:
            return False
        try:
            parsed = Receipt.parse(found)
        except TransparencyError:
            return False
        if parsed.leaf_hash.hex() != receipt.log_leaf_hash:
            return False
        self._store.save_receipt(receipt.evidence_id, found.decode("utf-8"), self._clock())
        self.kept += 1
        return True


@dataclass(frozen=True)
class ReceiptCheck:
    """One kept receipt checked on the device: ``verified`` (signed by the log's key, proving
    the leaf hash the upload's answer named), ``invalid`` (``detail`` says why) or ``missing``
    (not fetched yet)."""

    evidence_id: str
    item_id: int
    status: Literal["verified", "invalid", "missing"]
    detail: str = ""
    checkpoint_size: int | None = None


def check_kept(kept: StoredReceipt, verifiers: VerifierSet) -> ReceiptCheck:
    """Check one kept receipt with the log's verifier keys, and that it is the receipt of the
    leaf the upload's answer named (a valid receipt of another leaf proves nothing here)."""
    if kept.receipt is None:
        return ReceiptCheck(kept.evidence_id, kept.item_id, "missing", "not fetched yet")
    try:
        opened = check_receipt(kept.receipt, verifiers)
        leaf = Receipt.parse(kept.receipt).leaf_hash.hex()
    except TransparencyError as error:
        return ReceiptCheck(kept.evidence_id, kept.item_id, "invalid", str(error))
    if leaf != kept.log_leaf_hash:
        detail = "the receipt is of another leaf than the one the upload's answer named"
        return ReceiptCheck(kept.evidence_id, kept.item_id, "invalid", detail)
    size = opened.checkpoint.size
    return ReceiptCheck(kept.evidence_id, kept.item_id, "verified", checkpoint_size=size)
