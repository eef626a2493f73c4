"""The receipts of what the device sent: fetched from the server and kept beside the outbox's
records with the log's entry of each pack, then checked on the device against the log's verifier
keys and against what the device sent (:mod:`conclave.edge_client.pack_entries`).

A receipt exists once the server signs the checkpoint covering the pack's leaf, about a second
after the upload: until then the server answers 404 ``LEAF_NOT_FOUND`` (or ``BEYOND_LOG``), and the
collector asks again with a short backoff, for at most ``wait_seconds`` per pack. It runs beside a
sync run's uploads and never holds an item: the item is ``SENT`` before its receipt is asked for,
and a receipt not fetched in time (server slow, gone, a link it refuses) stays missing in the
outbox until :meth:`conclave.edge_client.Outbox.fetch_receipts` asks again. Once a receipt is
kept, the leaf it names (its index) is asked for at once, within the same deadline; an entry
that is not that leaf's data is not kept and asked for again later the same way. Given the
log's verifier keys (:meth:`conclave.edge_client.Outbox.fetch_receipts` asks the server for
them), a receipt they do not verify is not kept either: a man in the middle without the key,
present for one fetch, cannot leave a broken receipt in place of the real one for good.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from conclave.edge_client.client import EdgeClient
from conclave.edge_client.errors import ReceiptUnavailable, ServerUnreachable
from conclave.edge_client.outbox_records import SentUpload, StoredReceipt
from conclave.edge_client.pack_entries import entry_differences, entry_of_answer
from conclave.edge_client.receipts import check_receipt
from conclave.edge_client.store import OutboxStore
from conclave.platform.transparency.errors import TransparencyError
from conclave.platform.transparency.note import VerifierSet
from conclave.platform.transparency.receipt import Receipt

FIRST_DELAY = 0.25
"""Seconds between two rounds of asking for the receipts not signed yet; doubled after each
round, at most :data:`MAX_DELAY`."""
MAX_DELAY = 1.0


@dataclass
class _Wanted:
    """One pack whose receipt or entry is still to fetch, until ``deadline`` (loop time)."""

    receipt: StoredReceipt
    deadline: float
    done: bool = False


class ReceiptCollector:
    """Fetches receipts and the log's entries of their packs in the background and keeps them
    in the outbox: one task asks for everything still wanted in turn (one request at a time,
    whatever the number of items sent), each pack's until its receipt and entry are kept or its
    own deadline passed; :meth:`finish` waits for that."""

    def __init__(
        self,
        client: EdgeClient,
        store: OutboxStore,
        *,
        wait_seconds: float,
        clock: Callable[[], float],
        verifiers: VerifierSet | None = None,
    ) -> None:
        self._client = client
        self._verifiers = verifiers
        self._store = store
        self._wait = wait_seconds
        self._clock = clock
        self._wanted: list[_Wanted] = []
        self._task: asyncio.Task[None] | None = None
        self.kept = 0
        """Packs whose receipt and entry are now both kept."""

    def collect(self, receipts: Sequence[StoredReceipt]) -> None:
        """Ask for these receipts (and then their entries; only the entry of one whose receipt
        is kept already) from now on, each pack's for at most ``wait_seconds``."""
        deadline = asyncio.get_running_loop().time() + self._wait
        # Per pack: one asked for twice would be counted kept twice.
        asked = {wanted.receipt.evidence_id for wanted in self._wanted}
        for receipt in receipts:
            if receipt.evidence_id not in asked:
                asked.add(receipt.evidence_id)
                self._wanted.append(_Wanted(receipt, deadline))
        if self._wanted and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._run())

    async def finish(self) -> int:
        """Wait until every pack asked for has its receipt and entry kept or is out of time; how
        many were kept."""
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
                if loop.time() < wanted.deadline:
                    try:
                        # No request outlives its pack's deadline: a server that stalls cannot
                        # hold the run for a time-out per request.
                        async with asyncio.timeout_at(wanted.deadline):
                            wanted.receipt = await self._fetch(wanted.receipt)
                    except (ServerUnreachable, TimeoutError):
                        self._wanted = []  # the next packs would wait the same way: ask later
                        return
                    except Exception:
                        # An answer nobody foresaw costs this pack this round, not the other
                        # packs their receipts: it is asked for again like any other refusal.
                        pass
                    self.kept += wanted.receipt.entry is not None
                wanted.done = wanted.receipt.entry is not None or loop.time() >= wanted.deadline
            self._wanted = [wanted for wanted in self._wanted if not wanted.done]
            if self._wanted:
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_DELAY)

    async def _fetch(self, receipt: StoredReceipt) -> StoredReceipt:
        """Ask once for what is still missing of one pack (its receipt, then its entry); the
        pack as now kept. Only a receipt of the leaf the upload's answer named, and only the
        data of that leaf, are kept: anything else answered in their place (a proxy's page,
        another leaf's receipt or data) stays missing, and is asked for again later."""
        document = receipt.receipt
        if document is None:
            document = await self._receipt(receipt)
            if document is None:
                return receipt
            receipt = replace(receipt, receipt=document)
        try:
            index = Receipt.parse(document).index
            answer = await self._client.leaf(receipt.receipt_path, index)
        except ServerUnreachable:
            raise
        except (ReceiptUnavailable, TransparencyError):
            return receipt
        entry = entry_of_answer(answer, index, receipt.log_leaf_hash)
        if entry is None:
            return receipt
        self._store.save_entry(receipt.evidence_id, entry, self._clock())
        return replace(receipt, entry=entry)

    async def _receipt(self, receipt: StoredReceipt) -> str | None:
        try:
            found = await self._client.receipt(receipt.receipt_path)
        except ServerUnreachable:
            raise
        except ReceiptUnavailable:
            return None
        if found is None:
            return None
        try:
            parsed = Receipt.parse(found)
        except TransparencyError:
            return None
        if parsed.leaf_hash.hex() != receipt.log_leaf_hash:
            return None
        if self._verifiers is not None:
            try:
                check_receipt(found, self._verifiers)
            except TransparencyError:
                return None
        document = found.decode("utf-8")  # Receipt.parse read it as UTF-8 already
        self._store.save_receipt(receipt.evidence_id, document, self._clock())
        return document


@dataclass(frozen=True)
class ReceiptCheck:
    """One kept receipt checked on the device: ``verified`` (signed by the log's key, proving
    that the log holds the leaf the upload's answer named, and that leaf's entry is of the
    bytes the device sent), ``invalid`` (``detail`` says why) or ``missing`` (the receipt or
    the entry not fetched yet, or what was sent not recorded: ``detail`` says which)."""

    evidence_id: str
    item_id: int
    status: Literal["verified", "invalid", "missing"]
    detail: str = ""
    checkpoint_size: int | None = None


def check_uploads(
    uploads: Sequence[SentUpload], kept: Sequence[StoredReceipt]
) -> list[ReceiptCheck]:
    """The checks of the packs the uploads' answers named that have no receipt row of their
    own item (the rows are keyed on evidence ids): ``invalid`` when another item's answer named
    that pack already (this upload may never have been logged), ``missing`` when the answer
    linked no receipt. Said only of a server that publishes the log, one that linked a receipt
    for some upload of this outbox (with none at all, the server keeps no log: nothing to
    check). Uploads recorded before schema version 4 are not listed here."""
    if not kept:
        return []
    owners = {found.evidence_id: found.item_id for found in kept}
    checks = []
    for upload in uploads:
        if not upload.evidence_ids:
            detail = "the upload's answer named no pack: there is no receipt to prove it logged"
            checks.append(ReceiptCheck("", upload.item_id, "missing", detail))
        for evidence_id in upload.evidence_ids:
            owner = owners.get(evidence_id)
            if owner == upload.item_id:
                continue
            if owner is not None:
                detail = (
                    f"the upload's answer named the pack of item {owner}'s upload: nothing "
                    "shows this upload was logged"
                )
                checks.append(ReceiptCheck(evidence_id, upload.item_id, "invalid", detail))
            else:
                detail = "the upload's answer linked no receipt of this pack"
                checks.append(ReceiptCheck(evidence_id, upload.item_id, "missing", detail))
    return checks


def check_kept(kept: StoredReceipt, verifiers: VerifierSet) -> ReceiptCheck:
    """Check one kept receipt with the log's verifier keys, that it is the receipt of the leaf
    the upload's answer named (a valid receipt of another leaf proves nothing here), and that
    the log's entry of that leaf is of what the device sent (a leaf of another pack, another
    device's say, proves nothing either)."""
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
    if kept.part_index is None:
        detail = (
            "what the device sent was not recorded (sent by an earlier client version): the "
            "log's entry cannot be compared with it"
        )
        return ReceiptCheck(kept.evidence_id, kept.item_id, "missing", detail, size)
    if kept.entry is None:
        detail = "the log's entry of the pack is not fetched yet"
        return ReceiptCheck(kept.evidence_id, kept.item_id, "missing", detail, size)
    # BLOB as the client stores it; text if the outbox was edited by hand.
    entry = kept.entry if isinstance(kept.entry, bytes) else str(kept.entry).encode()
    differences = entry_differences(kept, entry)
    if differences:
        return ReceiptCheck(kept.evidence_id, kept.item_id, "invalid", "; ".join(differences))
    detail = "" if kept.device_id is not None else "the device's id was not compared"
    return ReceiptCheck(kept.evidence_id, kept.item_id, "verified", detail, size)
