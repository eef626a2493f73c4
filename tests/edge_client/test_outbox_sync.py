"""Queued uploads reach the real edge service once each, whatever happens to the network."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import httpx

from conclave.edge_client import EdgeClient, Outbox
from tests.conftest import Backend
from tests.edge_client.conftest import (
    FAST_RETRY,
    FailFirst,
    FakeClock,
    LoseResponse,
    edge_server,
    envelopes,
    free_port,
    in_process_client,
    media_files,
    server_packs,
)


async def test_offline_queue_then_sync_sends_every_item_once(backend: Backend, tmp_path) -> None:
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    items = outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 150), site="north"))
    assert {(item.state, item.attempts) for item in items} == {("PENDING", 0)}
    assert len({item.idempotency_key for item in items}) == 150

    async with (
        edge_server(backend, tmp_path / "server") as app,
        in_process_client(app) as client,
    ):
        report = await outbox.sync(client, concurrency=4)

    assert len(report.sent) == 150 and not report.failed and not report.retrying
    sent = outbox.sent()
    assert len(sent) == 150 and not outbox.pending() and not outbox.failed()
    assert {item.idempotency_key: item.evidence_ids for item in sent} == await server_packs(backend)
    assert outbox.cleanup() == 150
    assert outbox.counts()["SENT"] == 0
    outbox.close()


async def test_missing_file_fails_until_retried_by_hand(backend: Backend, tmp_path) -> None:
    clock = FakeClock()
    outbox = Outbox(tmp_path / "outbox.sqlite3", clock=clock, retry_policy=FAST_RETRY)
    [path] = media_files(tmp_path / "media", 1)
    content = path.read_bytes()
    item = outbox.enqueue(envelopes([path])[0])
    path.unlink()
    async with (
        edge_server(backend, tmp_path / "server") as app,
        in_process_client(app) as client,
    ):
        report = await outbox.sync(client)
        assert report.failed == [item.id]
        [failed] = outbox.failed()
        assert (failed.state, failed.attempts, failed.auto_retry) == ("FAILED", 1, False)
        assert "missing" in (failed.last_error or "")

        clock.advance(3600)  # a permanent failure is never retried by itself
        assert (await outbox.sync(client)).attempted == 0

        path.write_bytes(content)
        assert outbox.retry([item.id]) == 1
        assert [(i.state, i.attempts) for i in outbox.pending()] == [("PENDING", 1)]
        report = await outbox.sync(client)
    assert report.sent == [item.id]
    [sent] = outbox.sent()
    assert (await server_packs(backend)) == {item.idempotency_key: sent.evidence_ids}
    outbox.close()


async def test_server_errors_are_retried_with_backoff(backend: Backend, tmp_path) -> None:
    clock = FakeClock()
    outbox = Outbox(tmp_path / "outbox.sqlite3", clock=clock, retry_policy=FAST_RETRY)
    items = outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 3)))
    async with edge_server(backend, tmp_path / "server") as app:
        flaky = FailFirst(httpx.ASGITransport(app=app), count=3, status=500)
        async with in_process_client(app, transport=flaky) as client:
            report = await outbox.sync(client)
            # A 500 is this request's trouble: the run goes on with the other items.
            assert sorted(report.retrying) == [item.id for item in items]
            failed = outbox.failed()
            assert {(i.attempts, i.auto_retry) for i in failed} == {(1, True)}
            assert all(clock.now + 1 <= i.next_attempt_at <= clock.now + 2 for i in failed)
            assert "HTTP 500" in (failed[0].last_error or "")

            assert (await outbox.sync(client)).attempted == 0  # not due yet
            clock.advance(2)
            report = await outbox.sync(client)
    assert sorted(report.sent) == [item.id for item in items]
    assert {i.idempotency_key: i.evidence_ids for i in outbox.sent()} == await server_packs(backend)
    outbox.close()


async def test_unreachable_server_stops_the_run_and_backs_off(tmp_path) -> None:
    clock = FakeClock()
    outbox = Outbox(tmp_path / "outbox.sqlite3", clock=clock, retry_policy=FAST_RETRY)
    first, *rest = outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 4)))
    # A port nobody listens on: a real "connection refused".
    async with EdgeClient(f"http://127.0.0.1:{free_port()}", timeout=5) as client:
        report = await outbox.sync(client)
        # The rest would fail the same way: left untouched, attempts 0.
        assert report.retrying == [first.id] and report.stopped
        assert [(i.id, i.attempts) for i in outbox.pending()] == [(i.id, 0) for i in rest]
        [failed] = outbox.failed()
        assert failed.auto_retry and "ConnectError" in (failed.last_error or "")

        single = Outbox(tmp_path / "single.sqlite3", clock=clock, retry_policy=FAST_RETRY)
        item = single.enqueue(envelopes(media_files(tmp_path / "one", 1))[0])
        delays = []
        for _ in range(5):
            await single.sync(client)
            item = single.get(item.id)
            delays.append(item.next_attempt_at - clock.now)
            clock.advance(delays[-1])
    assert item.attempts == 5
    # Base 2 s doubling, jitter takes up to half off: attempt n waits within [2**n / 2, 2**n].
    assert all(2**n / 2 <= delay <= 2**n for n, delay in enumerate(delays, start=1)), delays
    outbox.close()
    single.close()


async def test_a_lost_response_never_creates_a_second_pack(backend: Backend, tmp_path) -> None:
    clock = FakeClock()
    outbox = Outbox(tmp_path / "outbox.sqlite3", clock=clock, retry_policy=FAST_RETRY)
    item = outbox.enqueue(envelopes(media_files(tmp_path / "media", 1))[0])
    async with edge_server(backend, tmp_path / "server") as app:
        lossy = LoseResponse(httpx.ASGITransport(app=app))
        async with in_process_client(app, transport=lossy) as client:
            report = await outbox.sync(client)
            assert report.retrying == [item.id]
            stored = json.loads(lossy.answers[0].text)["evidence_ids"]
            clock.advance(2)
            report = await outbox.sync(client)
    assert report.sent == [item.id] and report.duplicates == 1
    assert outbox.get(item.id).evidence_ids == stored
    assert await server_packs(backend) == {item.idempotency_key: stored}
    outbox.close()


async def test_concurrent_syncs_send_each_item_once(backend: Backend, tmp_path) -> None:
    path = tmp_path / "outbox.sqlite3"
    first, second = Outbox(path), Outbox(path)
    items = first.enqueue_many(envelopes(media_files(tmp_path / "media", 40)))
    async with (
        edge_server(backend, tmp_path / "server") as app,
        in_process_client(app) as client,
    ):
        reports = await asyncio.gather(
            first.sync(client, concurrency=3), second.sync(client, concurrency=3)
        )
    sent = [item_id for report in reports for item_id in report.sent]
    assert sorted(sent) == [item.id for item in items]  # every item once, none twice
    assert all(report.sent for report in reports)  # both runs did part of the work
    assert sum(report.duplicates for report in reports) == 0
    assert {i.idempotency_key: i.evidence_ids for i in first.sent()} == await server_packs(backend)
    first.close()
    second.close()


async def test_an_item_held_by_a_crashed_run_is_sent_after_its_lease(
    backend: Backend, tmp_path
) -> None:
    clock = FakeClock()
    outbox = Outbox(tmp_path / "outbox.sqlite3", clock=clock, lease_seconds=120)
    item = outbox.enqueue(envelopes(media_files(tmp_path / "media", 1))[0])
    # What a run that died mid-send leaves behind: a claim with a lease, nothing else.
    with sqlite3.connect(outbox.path) as crashed:
        crashed.execute(
            "UPDATE outbox_items SET claimed_by = 'dead', lease_until = ? WHERE id = ?",
            (clock.now + 120, item.id),
        )
    crashed.close()
    async with (
        edge_server(backend, tmp_path / "server") as app,
        in_process_client(app) as client,
    ):
        assert outbox.counts()["sending"] == 1
        assert (await outbox.sync(client)).attempted == 0
        clock.advance(121)
        report = await outbox.sync(client)
    assert report.sent == [item.id]
    assert len(await server_packs(backend)) == 1
    outbox.close()
