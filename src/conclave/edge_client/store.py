"""All SQL of the outbox: a SQLite file in WAL mode, every change in its own short transaction.

Concurrency: a sync run claims one item at a time with a single ``UPDATE … RETURNING`` inside a
``BEGIN IMMEDIATE`` transaction, which holds SQLite's one write lock, so two runs (threads or
processes, each with its own connection) can never claim the same item. The claim is a lease
(``claimed_by``, ``lease_until``): a client that crashes mid-send loses it when the lease ends and
the item is sent again, with the same idempotency key, by the next run.

Durability: what the user asked for (enqueue, retry, cleanup) is committed with
``synchronous=FULL`` and survives a power cut once the call returns. The bookkeeping of a sync run
(claim, lease renewal, release, SENT, FAILED) is committed with ``synchronous=NORMAL``: it survives
a crash of the process, and a power cut can only roll the last of these changes back, never tear
the file (WAL). A lost SENT or FAILED makes the next run send the item again with the same
idempotency key, which the server answers with the original evidence ids; a lost claim only frees
the item early. Two fsyncs per item would otherwise cost more than the upload of a small file.
A sync run ends with :meth:`OutboxStore.flush`, so what it recorded is on disk when it returns.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from conclave.edge_client.device import DeviceIdentity, new_identity
from conclave.edge_client.envelope import Envelope
from conclave.edge_client.errors import OutboxCorrupt
from conclave.edge_client.outbox_records import OutboxItem, SentUpload, StoredReceipt

SCHEMA_VERSION = 4
# Version 2 added ``receipts``; a version-1 outbox gets the table when it is opened (the
# statements below create only what is missing). Version 3 added the columns of
# ``_RECEIPT_COLUMNS`` to it, added to a version-2 table when it is opened. Version 4 added
# ``sent_uploads``: the packs each accepted upload named, one row per item, kept through
# cleanup, so the check can tell an upload with no receipt of its own (the receipt rows are
# keyed on evidence ids, and a server may name another upload's pack or no link at all).
# ``queued`` = 1 for what sync sends without being asked: PENDING items and FAILED ones whose
# failure was transient. The partial index holds only those, so finding the next due item stays
# cheap however many SENT or permanently FAILED rows pile up.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox_items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT NOT NULL UNIQUE,
    source_type TEXT NOT NULL,
    source_uri TEXT NOT NULL,
    metadata TEXT NOT NULL,
    correlation_id TEXT,
    sampling_policy_ref TEXT,
    created_utc TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('PENDING', 'SENT', 'FAILED')),
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    queued INTEGER NOT NULL DEFAULT 1,
    next_attempt_at REAL NOT NULL,
    claimed_by TEXT,
    lease_until REAL,
    evidence_ids TEXT,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_items_due
    ON outbox_items (next_attempt_at, id) WHERE queued = 1;
CREATE INDEX IF NOT EXISTS outbox_items_state ON outbox_items (state, id);
CREATE INDEX IF NOT EXISTS outbox_items_changed ON outbox_items (state, updated_at);
CREATE TABLE IF NOT EXISTS receipts (
    evidence_id TEXT PRIMARY KEY,
    item_id INTEGER NOT NULL,
    log_leaf_hash TEXT NOT NULL,
    receipt_path TEXT NOT NULL,
    receipt TEXT,
    fetched_at REAL
);
CREATE INDEX IF NOT EXISTS receipts_missing ON receipts (item_id) WHERE receipt IS NULL;
CREATE TABLE IF NOT EXISTS sent_uploads (
    item_id INTEGER PRIMARY KEY,
    evidence_ids TEXT NOT NULL,
    sent_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS device (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    device_id TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    created_utc TEXT NOT NULL
);
"""
# What the device sent of each pack's file, and the log's entry of the pack (its leaf's data,
# the bytes the receipt's leaf hash is of), to compare them on the device. A row kept before
# version 3 has them all NULL: what was sent was not recorded then.
_RECEIPT_COLUMNS = {
    "part_index": "INTEGER",
    "sent_sha256": "TEXT",
    "sent_size": "INTEGER",
    "device_id": "TEXT",
    "idempotency_key_sha256": "TEXT",
    "entry": "BLOB",
    "entry_fetched_at": "REAL",
}
# Created after the columns: an entry is kept only with its receipt, so "entry IS NULL" is
# everything still to fetch.
_RECEIPTS_UNPROVEN = (
    "CREATE INDEX IF NOT EXISTS receipts_unproven ON receipts (item_id) WHERE entry IS NULL"
)


class OutboxStore:
    """The outbox database; not thread-safe (one per thread or process)."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._db = connection
        self.path = path
        self._durable = True  # the connection's synchronous setting: FULL (True) or NORMAL

    @classmethod
    def open(cls, path: Path, created_utc: str) -> OutboxStore:
        """Open or create the outbox at ``path``; :class:`OutboxCorrupt` if it is not one."""
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists() and path.stat().st_size > 0
        try:
            # Autocommit mode: every write below opens its own explicit transaction.
            connection = sqlite3.connect(path, timeout=30.0, isolation_level=None)
            connection.row_factory = sqlite3.Row
        except sqlite3.Error as exc:
            raise OutboxCorrupt(f"The outbox {path} cannot be opened: {exc}") from exc
        try:
            cls._prepare(connection, path, existed, created_utc)
        except sqlite3.DatabaseError as exc:
            connection.close()
            raise OutboxCorrupt(
                f"The outbox {path} is damaged or not an outbox database ({exc}); it was left "
                "untouched. Move it aside to start a new one (unsent items in it are lost)."
            ) from exc
        except BaseException:
            connection.close()
            raise
        return cls(connection, path)

    @staticmethod
    def _prepare(connection: sqlite3.Connection, path: Path, existed: bool, now: str) -> None:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if existed and (version > SCHEMA_VERSION or (tables and "outbox_items" not in tables)):
            raise sqlite3.DatabaseError("unknown schema")
        if existed and connection.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            raise sqlite3.DatabaseError("integrity check failed")
        connection.execute("PRAGMA journal_mode=WAL")
        # FULL: an enqueue that returned survives a power cut, not only a process crash.
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("BEGIN IMMEDIATE")
        try:
            # Statement by statement: executescript() would commit the open transaction first.
            for statement in filter(str.strip, _SCHEMA.split(";")):
                connection.execute(statement)
            present = {row[1] for row in connection.execute("PRAGMA table_info(receipts)")}
            for name, kind in _RECEIPT_COLUMNS.items():
                if name not in present:
                    connection.execute(f"ALTER TABLE receipts ADD COLUMN {name} {kind}")
            connection.execute(_RECEIPTS_UNPROVEN)
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            identity = new_identity(now)
            connection.execute(
                "INSERT OR IGNORE INTO device (id, device_id, fingerprint, created_utc) "
                "VALUES (1, ?, ?, ?)",
                (identity.device_id, identity.fingerprint, identity.created_utc),
            )
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    @contextmanager
    def _write(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        # ``durable=False`` for a sync run's bookkeeping only (see the module docstring). The
        # setting is per connection and cannot change inside a transaction, so it is set here.
        if durable != self._durable:
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._durable = durable
        # IMMEDIATE takes the write lock at BEGIN, so a read-then-write cannot be overtaken.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def flush(self) -> None:
        """Put the changes committed with ``durable=False`` on disk (a passive checkpoint syncs
        the WAL first; it waits for no other connection)."""
        self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()

    def device(self) -> DeviceIdentity:
        """The identity stored with this outbox."""
        row = self._db.execute(
            "SELECT device_id, fingerprint, created_utc FROM device WHERE id = 1"
        ).fetchone()
        return DeviceIdentity(*row)

    def insert(self, rows: Sequence[dict[str, Any]]) -> list[int]:
        """Insert PENDING items (all or none); return their ids."""
        with self._write() as db:
            return [
                db.execute(
                    "INSERT INTO outbox_items (idempotency_key, source_type, source_uri, metadata,"
                    " correlation_id, sampling_policy_ref, created_utc, state, attempts, queued,"
                    " next_attempt_at, updated_at) VALUES (:idempotency_key, :source_type,"
                    " :source_uri, :metadata, :correlation_id, :sampling_policy_ref,"
                    " :created_utc, 'PENDING', 0, 1, :now, :now) RETURNING id",
                    row,
                ).fetchone()[0]
                for row in rows
            ]

    def claim(
        self, runner: str, now: float, due_by: float, lease_until: float
    ) -> OutboxItem | None:
        """Take the oldest item due by ``due_by`` that no live lease holds; FAILED (transient)
        items go back to PENDING as they are taken."""
        with self._write(durable=False) as db:
            row = db.execute(
                "UPDATE outbox_items SET state = 'PENDING', claimed_by = ?, lease_until = ?,"
                " updated_at = ? WHERE id = (SELECT id FROM outbox_items WHERE queued = 1"
                " AND next_attempt_at <= ? AND (lease_until IS NULL OR lease_until < ?)"
                " ORDER BY next_attempt_at, id LIMIT 1) RETURNING *",
                (runner, lease_until, now, due_by, now),
            ).fetchone()
        return _item(row, now) if row else None

    def renew(self, item_id: int, runner: str, lease_until: float) -> None:
        """Extend a lease this runner still holds."""
        with self._write(durable=False) as db:
            db.execute(
                "UPDATE outbox_items SET lease_until = ? WHERE id = ? AND claimed_by = ?",
                (lease_until, item_id, runner),
            )

    def release(self, item_id: int, runner: str) -> None:
        """Give a claimed item back untouched (the run stopped before sending it)."""
        with self._write(durable=False) as db:
            db.execute(
                "UPDATE outbox_items SET claimed_by = NULL, lease_until = NULL"
                " WHERE id = ? AND claimed_by = ?",
                (item_id, runner),
            )

    def mark_sent(
        self,
        item_id: int,
        evidence_ids: list[str],
        now: float,
        receipts: Sequence[StoredReceipt] = (),
        packs_sent: Sequence[str] = (),
    ) -> list[StoredReceipt]:
        """Record the server's evidence ids and its receipt links with what was sent of each
        pack's file (the receipt and the log's entry are fetched later), and ``packs_sent``, the
        packs the answer named for the files sent; the item is done whoever held it. The links
        now kept as this item's: a link of a pack another item's answer named already is not
        (that item keeps its row; the check finds this one without a receipt of its own)."""
        with self._write(durable=False) as db:
            db.execute(
                "UPDATE outbox_items SET state = 'SENT', queued = 0, evidence_ids = ?,"
                " claimed_by = NULL, lease_until = NULL, updated_at = ? WHERE id = ?",
                (json.dumps(evidence_ids), now, item_id),
            )
            db.execute(
                "INSERT OR REPLACE INTO sent_uploads (item_id, evidence_ids, sent_at)"
                " VALUES (?, ?, ?)",
                (item_id, json.dumps(list(packs_sent)), now),
            )
            db.executemany(
                "INSERT OR IGNORE INTO receipts (evidence_id, item_id, log_leaf_hash,"
                " receipt_path, part_index, sent_sha256, sent_size, device_id,"
                " idempotency_key_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        link.evidence_id,
                        item_id,
                        link.log_leaf_hash,
                        link.receipt_path,
                        link.part_index,
                        link.sent_sha256,
                        link.sent_size,
                        link.device_id,
                        link.idempotency_key_sha256,
                    )
                    for link in receipts
                ],
            )
            mine = {
                row[0]
                for row in db.execute(
                    "SELECT evidence_id FROM receipts WHERE item_id = ?", (item_id,)
                )
            }
        return [link for link in receipts if link.evidence_id in mine]

    def sent_uploads(self) -> list[SentUpload]:
        """Every upload recorded by :meth:`mark_sent` (schema version 4 on), by item."""
        rows = self._db.execute(
            "SELECT item_id, evidence_ids FROM sent_uploads ORDER BY item_id"
        ).fetchall()
        return [SentUpload(row[0], json.loads(row[1])) for row in rows]

    def save_receipt(self, evidence_id: str, receipt: str, now: float) -> None:
        """Keep a fetched receipt (committed as a sync run's bookkeeping is: see above)."""
        with self._write(durable=False) as db:
            db.execute(
                "UPDATE receipts SET receipt = ?, fetched_at = ? WHERE evidence_id = ?",
                (receipt, now, evidence_id),
            )

    def save_entry(self, evidence_id: str, entry: bytes, now: float) -> None:
        """Keep the log's entry of a pack whose receipt is kept (the data its leaf hash is of)."""
        with self._write(durable=False) as db:
            db.execute(
                "UPDATE receipts SET entry = ?, entry_fetched_at = ? WHERE evidence_id = ?"
                " AND receipt IS NOT NULL",
                (entry, now, evidence_id),
            )

    def receipts(self, *, missing_only: bool = False) -> list[StoredReceipt]:
        """The receipts of what was sent, by item (only those whose receipt or entry is not
        fetched yet, if asked)."""
        where = " WHERE entry IS NULL" if missing_only else ""
        rows = self._db.execute(
            "SELECT evidence_id, item_id, log_leaf_hash, receipt_path, receipt, fetched_at,"
            " part_index, sent_sha256, sent_size, device_id, idempotency_key_sha256,"
            f" entry, entry_fetched_at FROM receipts{where} ORDER BY item_id, evidence_id"
        ).fetchall()
        return [StoredReceipt(*row) for row in rows]

    def mark_failed(
        self, item_id: int, runner: str, error: str, *, retry_at: float | None, now: float
    ) -> None:
        """FAILED, attempts + 1, error kept; sent again by itself at ``retry_at`` when given.

        Only while ``runner`` still holds the item: if its lease ran out and another run took
        the item over, that run's outcome is the one that counts.
        """
        with self._write(durable=False) as db:
            db.execute(
                "UPDATE outbox_items SET state = 'FAILED', attempts = attempts + 1,"
                " last_error = ?, queued = ?, next_attempt_at = ?, claimed_by = NULL,"
                " lease_until = NULL, updated_at = ? WHERE id = ? AND claimed_by = ?",
                (
                    _storable(error),
                    int(retry_at is not None),
                    retry_at or now,
                    now,
                    item_id,
                    runner,
                ),
            )

    def requeue(self, ids: Sequence[int] | None, now: float) -> int:
        """FAILED → PENDING, due now (all FAILED items when ``ids`` is None); return the count."""
        query = (
            "UPDATE outbox_items SET state = 'PENDING', queued = 1, next_attempt_at = ?,"
            " updated_at = ? WHERE state = 'FAILED'"
        )
        with self._write() as db:
            if ids is None:
                return db.execute(query, (now, now)).rowcount
            return sum(
                db.execute(query + " AND id = ?", (now, now, item_id)).rowcount for item_id in ids
            )

    def delete_sent(self) -> int:
        """Remove every SENT item; return how many. Their receipts stay: they are the device's
        proof of what the server logged."""
        with self._write() as db:
            return db.execute("DELETE FROM outbox_items WHERE state = 'SENT'").rowcount

    def items(
        self, state: str, now: float, limit: int | None = None, newest_first: bool = False
    ) -> list[OutboxItem]:
        """Items in ``state``, by id (or by last change, newest first)."""
        order = "updated_at DESC" if newest_first else "id"
        rows = self._db.execute(
            f"SELECT * FROM outbox_items WHERE state = ? ORDER BY {order} LIMIT ?",
            (state, -1 if limit is None else limit),
        ).fetchall()
        return [_item(row, now) for row in rows]

    def get(self, item_id: int, now: float) -> OutboxItem | None:
        """One item by id."""
        row = self._db.execute("SELECT * FROM outbox_items WHERE id = ?", (item_id,)).fetchone()
        return _item(row, now) if row else None

    def due_count(self, now: float) -> int:
        """Items a sync run started at ``now`` would try."""
        row = self._db.execute(
            "SELECT count(*) FROM outbox_items WHERE queued = 1 AND next_attempt_at <= ?", (now,)
        ).fetchone()
        return int(row[0])

    def counts(self, now: float) -> dict[str, int]:
        """Items per state, plus ``retrying`` (FAILED, sent again by itself) and ``sending``."""
        counts = {"PENDING": 0, "SENT": 0, "FAILED": 0, "retrying": 0, "sending": 0}
        for state, count in self._db.execute(
            "SELECT state, count(*) FROM outbox_items GROUP BY state"
        ):
            counts[state] = count
        counts["retrying"] = self._db.execute(
            "SELECT count(*) FROM outbox_items WHERE queued = 1 AND state = 'FAILED'"
        ).fetchone()[0]
        counts["sending"] = self._db.execute(
            "SELECT count(*) FROM outbox_items WHERE queued = 1 AND lease_until >= ?", (now,)
        ).fetchone()[0]
        return counts


def _storable(text: str) -> str:
    """``text`` as SQLite can store it: an error message may quote a server's answer, whose
    lone surrogate would fail the write (and leave the item claimed), and whose NUL would cut
    it short."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _item(values: sqlite3.Row, now: float) -> OutboxItem:
    return OutboxItem(
        id=values["id"],
        state=values["state"],
        attempts=values["attempts"],
        envelope=Envelope(
            source_type=values["source_type"],
            source_uri=values["source_uri"],
            metadata=json.loads(values["metadata"]),
            correlation_id=values["correlation_id"],
            created_utc=values["created_utc"],
        ),
        sampling_policy_ref=values["sampling_policy_ref"],
        idempotency_key=values["idempotency_key"],
        last_error=values["last_error"],
        auto_retry=values["state"] == "FAILED" and bool(values["queued"]),
        next_attempt_at=values["next_attempt_at"],
        evidence_ids=json.loads(values["evidence_ids"] or "[]"),
        updated_at=values["updated_at"],
        sending=values["lease_until"] is not None and values["lease_until"] >= now,
    )
