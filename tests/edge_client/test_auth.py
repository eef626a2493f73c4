"""Bearer tokens and HMAC-signed uploads against the edge service's real checks."""

from __future__ import annotations

import httpx

from conclave.edge_client import EdgeClient, Outbox
from tests.conftest import Backend
from tests.edge_client.conftest import (
    BASE_URL,
    FAST_RETRY,
    FakeClock,
    LoseResponse,
    edge_server,
    envelopes,
    media_files,
    server_packs,
)

AUTH = {"auth": "enabled", "api_tokens": "tok-cam1=cam-1", "device_secrets": "cam-1=s3cret"}


class Recorder(httpx.AsyncBaseTransport):
    """Keeps the headers of every upload (not of the receipts asked for after it), then hands
    each request on."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.headers: list[httpx.Headers] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.headers.append(request.headers)
        return await self.inner.handle_async_request(request)


async def test_signed_uploads_are_accepted_and_replays_stay_single(
    backend: Backend, tmp_path
) -> None:
    clock = FakeClock()
    outbox = Outbox(tmp_path / "outbox.sqlite3", clock=clock, retry_policy=FAST_RETRY)
    item = outbox.enqueue(envelopes(media_files(tmp_path / "media", 1))[0])
    async with edge_server(backend, tmp_path / "server", **AUTH) as app:
        recorder = Recorder(LoseResponse(httpx.ASGITransport(app=app)))
        async with EdgeClient(
            BASE_URL, "tok-cam1", signing_secret="s3cret", transport=recorder
        ) as client:
            assert (await outbox.sync(client)).retrying == [item.id]  # answer lost
            clock.advance(2)
            report = await outbox.sync(client)
    assert report.sent == [item.id] and report.duplicates == 1
    first, second = recorder.headers
    assert first["authorization"] == "Bearer tok-cam1"
    # Each attempt signs afresh: a repeated nonce or signature would be refused as a replay.
    assert first["x-conclave-nonce"] != second["x-conclave-nonce"]
    assert first["idempotency-key"] == second["idempotency-key"] == item.idempotency_key
    assert await server_packs(backend) == {item.idempotency_key: outbox.get(item.id).evidence_ids}
    outbox.close()


async def test_credential_errors_are_permanent_failures(backend: Backend, tmp_path) -> None:
    outbox = Outbox(tmp_path / "outbox.sqlite3", retry_policy=FAST_RETRY)
    files = iter(media_files(tmp_path / "media", 3))
    async with edge_server(backend, tmp_path / "server", **AUTH) as app:
        recorder = Recorder(httpx.ASGITransport(app=app))
        cases = [
            (EdgeClient(BASE_URL, "tok-cam1", transport=recorder), "SIGNATURE_REQUIRED"),
            (EdgeClient(BASE_URL, None, transport=recorder), "HTTP 401"),
            (
                EdgeClient(BASE_URL, "tok-cam1", signing_secret="guess", transport=recorder),
                "INVALID_SIGNATURE",
            ),
        ]
        for client, expected in cases:
            item = outbox.enqueue(envelopes([next(files)])[0])
            async with client:
                assert (await outbox.sync(client)).failed == [item.id]
            failed = outbox.get(item.id)
            assert expected in (failed.last_error or "")
            assert (failed.state, failed.attempts, failed.auto_retry) == ("FAILED", 1, False)
    assert "authorization" not in recorder.headers[1]  # no token, no header
    assert await server_packs(backend) == {}
    outbox.close()
