"""Over a real socket: uvicorn serving the edge app, a proxy that loses the answer."""

from __future__ import annotations

from conclave.edge_client import EdgeClient, Outbox
from tests.conftest import Backend
from tests.edge_client.conftest import (
    FAST_RETRY,
    FakeClock,
    edge_server,
    envelopes,
    media_files,
    server_packs,
    socket_server,
)
from tests.edge_client.dropproxy import ResponseDroppingProxy


async def test_answer_lost_on_the_wire_creates_no_second_pack(backend: Backend, tmp_path) -> None:
    clock = FakeClock()
    outbox = Outbox(tmp_path / "outbox.sqlite3", clock=clock, retry_policy=FAST_RETRY)
    items = outbox.enqueue_many(envelopes(media_files(tmp_path / "media", 3)))
    async with edge_server(backend, tmp_path / "server") as app, socket_server(app) as port:
        proxy = ResponseDroppingProxy(port, drops=1)
        await proxy.start()
        try:
            async with EdgeClient(f"http://127.0.0.1:{port}") as direct:
                assert await direct.health()
            async with EdgeClient(f"http://127.0.0.1:{proxy.port}", timeout=10) as client:
                report = await outbox.sync(client)
                # The answer was cut after the server stored the pack: to the client this is a
                # broken connection, so it stops and retries later with the same key.
                assert report.retrying == [items[0].id] and proxy.dropped == 1
                assert "RemoteProtocolError" in (outbox.get(items[0].id).last_error or "")
                assert len(await server_packs(backend)) == 1
                clock.advance(2)
                report = await outbox.sync(client)
        finally:
            await proxy.close()
    assert sorted(report.sent) == [item.id for item in items] and report.duplicates == 1
    sent = {item.idempotency_key: item.evidence_ids for item in outbox.sent()}
    assert sent == await server_packs(backend)  # one pack per item, ids the server gave
    outbox.close()
