"""Device bearer tokens and HMAC request signatures with anti-replay."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time

import httpx
import pytest
from sqlalchemy import func, select

from conclave.edge.store import evidence_packs
from conclave.platform.signing import sign
from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings


@pytest.fixture
def embedded(sqlite_engine, memory_bus) -> Backend:
    return Backend("embedded", sqlite_engine, memory_bus)


def _body() -> tuple[bytes, str]:
    request = httpx.Request(
        "POST", "http://x/", files={"file": ("a.png", samples.png())}, data={"metadata": "{}"}
    )
    body = request.read()
    return body, request.headers["content-type"]


def _signed_headers(secret: str, body: bytes, content_type: str, **override: str) -> dict:
    timestamp = override.pop("timestamp", str(int(time.time())))
    nonce = override.pop("nonce", secrets.token_hex(16))
    digest = hashlib.sha256(body).hexdigest()
    return {
        "Authorization": "Bearer tok-cam1",
        "Content-Type": content_type,
        "X-Conclave-Timestamp": timestamp,
        "X-Conclave-Nonce": nonce,
        "X-Conclave-Signature": sign(secret, digest, timestamp, nonce),
        **override,
    }


async def _pack_count(backend: Backend) -> int:
    async with backend.engine.connect() as connection:
        return int(
            (
                await connection.execute(select(func.count()).select_from(evidence_packs))
            ).scalar_one()
        )


SIGNING = {"auth": "enabled", "api_tokens": "tok-cam1=cam-1", "device_secrets": "cam-1=s3cret"}


async def test_bearer_tokens_and_signatures(embedded, tmp_path) -> None:
    settings = edge_settings(
        tmp_path,
        auth="enabled",
        api_tokens="tok-cam1=cam-1,tok-cam2=cam-2",
        device_secrets="cam-1=s3cret",
    )
    body, content_type = _body()
    url = "/api/edge-intake/image"
    async with edge_app(embedded, settings) as (client, _app):
        assert (await client.get("/health")).status_code == 200  # public
        missing = await client.post(url, content=body, headers={"Content-Type": content_type})
        assert missing.status_code == 401
        wrong = await client.post(
            url, content=body, headers={"Content-Type": content_type, "Authorization": "Bearer x"}
        )
        assert wrong.status_code == 401

        # cam-2 has no secret: a token is enough.
        unsigned = await client.post(
            url,
            content=body,
            headers={"Content-Type": content_type, "Authorization": "Bearer tok-cam2"},
        )
        assert unsigned.status_code == 200, unsigned.text
        pack = (
            await client.get(
                f"/api/edge-intake/evidence/{unsigned.json()['evidence_ids'][0]}",
                headers={"Authorization": "Bearer tok-cam2"},
            )
        ).json()
        assert pack["device_id"] == "cam-2"

        # cam-1 has a secret: it must sign.
        no_signature = await client.post(
            url,
            content=body,
            headers={"Content-Type": content_type, "Authorization": "Bearer tok-cam1"},
        )
        assert no_signature.status_code == 401
        assert no_signature.json()["code"] == "SIGNATURE_REQUIRED"

        headers = _signed_headers("s3cret", body, content_type)
        signed = await client.post(url, content=body, headers=headers)
        assert signed.status_code == 200, signed.text

        replay = await client.post(url, content=body, headers=headers)
        assert replay.status_code == 401
        assert replay.json()["code"] == "REPLAYED_REQUEST"

        forged = await client.post(
            url, content=body, headers=_signed_headers("guess", body, content_type)
        )
        assert forged.json()["code"] == "INVALID_SIGNATURE"
        stale = _signed_headers(
            "s3cret", body, content_type, timestamp=str(int(time.time()) - 3600)
        )
        expired = await client.post(url, content=body, headers=stale)
        assert expired.json()["code"] == "SIGNATURE_EXPIRED"
        tampered = await client.post(
            url,
            content=body.replace(b"{}", b"[]"),
            headers=_signed_headers("s3cret", body, content_type),
        )
        assert tampered.json()["code"] == "INVALID_SIGNATURE"


async def test_spellings_of_one_captured_signature_are_one_replay(
    backend: Backend, tmp_path
) -> None:
    body, content_type = _body()
    url = "/api/edge-intake/image"
    captured = _signed_headers("s3cret", body, content_type)
    signature = captured["X-Conclave-Signature"]
    spellings = [signature.upper(), f"sha256={signature}", f"SHA256={signature.upper()}",
                 f" sha256={signature} "]  # fmt: skip
    async with edge_app(backend, edge_settings(tmp_path, **SIGNING)) as (client, _app):
        original = await client.post(url, content=body, headers=captured)
        assert original.status_code == 200, original.text
        # Sent at once, as an attacker would: the replay key must hold under a race too.
        replays = await asyncio.gather(
            *(
                client.post(url, content=body, headers={**captured, "X-Conclave-Signature": s})
                for s in spellings
            )
        )
        for replay in replays:
            assert replay.status_code == 401, replay.text
            assert replay.json()["code"] == "REPLAYED_REQUEST"
    assert await _pack_count(backend) == 1


async def test_signed_uploads_need_a_nonce(embedded, tmp_path) -> None:
    body, content_type = _body()
    url = "/api/edge-intake/image"
    timestamp = str(int(time.time()))
    digest = hashlib.sha256(body).hexdigest()
    without = {
        "Authorization": "Bearer tok-cam1",
        "Content-Type": content_type,
        "X-Conclave-Timestamp": timestamp,
        "X-Conclave-Signature": sign("s3cret", digest, timestamp),
    }
    async with edge_app(embedded, edge_settings(tmp_path, **SIGNING)) as (client, _app):
        missing = await client.post(url, content=body, headers=without)
        assert missing.status_code == 401
        assert missing.json()["code"] == "NONCE_REQUIRED"
        for nonce in ("short", "x" * 129, "spaces in the nonce!", "colons:are:not:allowed"):
            headers = _signed_headers("s3cret", body, content_type, nonce=nonce)
            bad = await client.post(url, content=body, headers=headers)
            assert bad.status_code == 401, nonce
            assert bad.json()["code"] == "INVALID_NONCE", (nonce, bad.json())
        not_hex = await client.post(
            url, content=body, headers={**without, "X-Conclave-Signature": "sha256=zz"}
        )
        assert not_hex.json()["code"] == "INVALID_SIGNATURE"
    assert await _pack_count(embedded) == 0
