"""The outbox on its own: thousands of items, envelopes checked at enqueue, identity, corruption."""

from __future__ import annotations

import sqlite3

import pytest

from conclave.edge_client import Envelope, InvalidEnvelope, Outbox, OutboxCorrupt
from tests.edge_client.conftest import FakeClock, media_files


def test_thousands_of_items_stay_cheap_to_queue_and_list(tmp_path) -> None:
    clock = FakeClock()
    outbox = Outbox(tmp_path / "outbox.sqlite3", clock=clock)
    [path] = media_files(tmp_path / "media", 1)
    envelope = Envelope.for_file("image", path)
    outbox.enqueue_many([envelope] * 2000)
    clock.advance(1)
    late = [outbox.enqueue(envelope) for _ in range(20)]
    assert outbox.counts()["PENDING"] == 2020
    assert len(outbox.pending()) == 2020
    assert [item.id for item in outbox.pending(limit=3)] == [1, 2, 3]
    assert late[-1].id == 2020 and outbox.due_count() == 2020
    keys = {item.idempotency_key for item in outbox.pending()}
    assert len(keys) == 2020  # the same file queued twice is two uploads
    # Finding the next item to send walks an index, never the whole table.
    with sqlite3.connect(outbox.path) as db:
        plan = db.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM outbox_items WHERE queued = 1"
            " AND next_attempt_at <= ? AND (lease_until IS NULL OR lease_until < ?)"
            " ORDER BY next_attempt_at, id LIMIT 1",
            (clock.now, clock.now),
        ).fetchall()
    db.close()
    assert "USING INDEX outbox_items_due" in " ".join(row[-1] for row in plan)
    outbox.close()


def test_enqueue_refuses_bad_envelopes_and_stores_nothing(tmp_path) -> None:
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    [path] = media_files(tmp_path / "media", 1)
    good = Envelope.for_file("image", path)
    bad = [
        Envelope("Image", good.source_uri),
        Envelope("image", str(tmp_path / "media")),
        Envelope("image", good.source_uri, metadata=[1, 2]),  # type: ignore[arg-type]
        Envelope("image", good.source_uri, metadata={"x": float("nan")}),
        # What the server refuses as UNSAFE_INPUT never waits in the outbox.
        Envelope("image", good.source_uri, metadata={"note": "\ud800"}),
        Envelope("image", good.source_uri, metadata={"note": "a\x00b"}),
        Envelope("image", good.source_uri, metadata={"count": 2**64}),
        Envelope("image", "https://example.org/a.png"),
        Envelope("image", good.source_uri, correlation_id="no spaces allowed"),
    ]
    for envelope in bad:
        with pytest.raises(InvalidEnvelope):
            outbox.enqueue_many([good, envelope])
    assert outbox.counts()["PENDING"] == 0
    outbox.close()


def test_the_envelope_is_the_specs_and_carries_the_device(tmp_path) -> None:
    [path] = media_files(tmp_path / "media", 1)
    with Outbox(tmp_path / "outbox.sqlite3") as outbox:
        envelope = Envelope.for_file("geo", path, {"lat": 45.0}, correlation_id="walk-7")
        item = outbox.enqueue(envelope)
        identity = outbox.device
    assert set(envelope.to_dict()) == {
        "source_type", "source_uri", "metadata", "correlation_id", "created_utc",
    }  # fmt: skip
    assert envelope.source_uri.startswith("file://") and envelope.created_utc.endswith("Z")
    assert item.envelope.metadata == {"device_id": identity.device_id, "lat": 45.0}
    with Outbox(tmp_path / "outbox.sqlite3") as reopened:
        assert reopened.device == identity and identity.on_original_machine
        assert len(identity.fingerprint) == 64


def test_a_corrupt_or_foreign_database_is_reported(tmp_path) -> None:
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"\x00not sqlite" * 512)
    with pytest.raises(OutboxCorrupt, match="untouched"):
        Outbox(garbage)
    foreign = tmp_path / "foreign.sqlite3"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE photos (id INTEGER)")
    db.close()
    with pytest.raises(OutboxCorrupt):
        Outbox(foreign)
    with sqlite3.connect(foreign) as db:
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("photos",)]
    db.close()
