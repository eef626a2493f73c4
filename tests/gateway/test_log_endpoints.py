"""The transparency log endpoints, through the gateway that publishes its ``calls`` log: what a
reader fetches verifies with the published keys alone, and bad input is a problem with its code."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from conclave.gateway.app import create_app
from conclave.platform.tlog import TransparencyLog, open_log
from conclave.platform.transparency import (
    ConsistencyBundle,
    NoteVerifier,
    Receipt,
    VerifierSet,
    open_checkpoint,
    verify_consistency_bundle,
    verify_receipt,
)
from tests.conftest import Backend, eventually, open_platform, serve_app, test_settings

AUTH = {"auth": "enabled", "api_tokens": "tok-ada=ada,tok-root=root", "operators": "root"}
BEARER = {"Authorization": "Bearer tok-ada"}
OPERATOR = {"Authorization": "Bearer tok-root"}


@asynccontextmanager
async def publishing(
    backend: Backend, data_dir: Path, **overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, TransparencyLog]]:
    """The gateway with its calls log, and a second handle on that log to fill it directly."""
    settings = test_settings(
        call_log=True, data_dir=data_dir, tlog_checkpoint_interval_seconds=0.01, **overrides
    )
    async with open_platform(backend, settings) as platform:
        app = create_app(settings, platform=platform)
        async with serve_app(app) as client:
            yield client, await open_log(backend.engine, settings, "calls")


async def integrated(log: TransparencyLog, size: int) -> None:
    async def reached() -> bool:
        await log.integrate()
        return (await log.state()).integrated_size >= size

    await eventually(reached)


async def verifiers(client: httpx.AsyncClient) -> VerifierSet:
    answer = await client.get("/logs/calls/keys")
    assert answer.status_code == 200
    return VerifierSet(NoteVerifier.from_vkey(key["vkey"]) for key in answer.json()["keys"])


async def test_a_new_log_publishes_its_empty_checkpoint_and_its_key(
    backend: Backend, tmp_path: Path
) -> None:
    async with publishing(backend, tmp_path) as (client, log):
        assert (await client.get("/logs")).json() == {"logs": ["calls"]}
        keys = (await client.get("/logs/calls/keys")).json()
        assert keys["origin"] == "conclave.localhost/calls" == log.origin
        assert [key["status"] for key in keys["keys"]] == ["current"]
        latest = await client.get("/logs/calls/checkpoint")
        assert latest.status_code == 200
        assert latest.headers["content-type"] == "text/plain; charset=utf-8"
        assert latest.headers["cache-control"] == "no-cache"
        opened = open_checkpoint(latest.text, await verifiers(client), origin=log.origin)
        assert opened.checkpoint.size == 0
        fixed = await client.get("/logs/calls/checkpoint/0")
        assert fixed.text == latest.text
        assert "immutable" in fixed.headers["cache-control"]


async def test_receipts_proofs_and_bundles_verify_with_the_published_keys(
    backend: Backend, tmp_path: Path
) -> None:
    async with publishing(backend, tmp_path, **AUTH) as (client, log):
        entries = [f"entry {index}".encode() for index in range(10)]
        await log.append(entries)
        await integrated(log, 10)
        keys = await verifiers(client)
        for index, entry in enumerate(entries):
            answer = await client.get(f"/logs/calls/receipt/{index}")
            assert answer.status_code == 200
            receipt = Receipt.parse(answer.text)
            leaf = (await client.get(f"/logs/calls/leaves/{index}", headers=OPERATOR)).json()
            data = base64.b64decode(leaf["data"])
            assert data == entry
            assert verify_receipt(receipt, keys, data).checkpoint.size == 10
        proof = await client.get("/logs/calls/proof/inclusion", params={"index": 3, "size": 10})
        assert proof.json()["size"] == 10 and len(proof.json()["inclusion_proof"]) == 4

        first = (await client.get("/logs/calls/checkpoint")).text
        await log.append([b"more"] * 7)
        await integrated(log, 17)
        bundle = await client.get(
            "/logs/calls/proof/consistency", params={"from": 10, "to": 17, "checkpoints": "true"}
        )
        assert bundle.status_code == 200
        parsed = ConsistencyBundle.parse(bundle.text)
        assert parsed.old == first
        old, new = verify_consistency_bundle(parsed, keys, origin=log.origin)
        assert (old.checkpoint.size, new.checkpoint.size) == (10, 17)
        bare = await client.get("/logs/calls/proof/consistency", params={"from": 10, "to": 17})
        assert bare.json() == {"from": 10, "to": 17, "proof": bundle.json()["proof"]}
        empty = await client.get("/logs/calls/proof/consistency", params={"from": 0, "to": 17})
        assert empty.json()["proof"] == []


async def test_leaf_data_needs_credentials_the_rest_does_not(
    backend: Backend, tmp_path: Path
) -> None:
    async with publishing(backend, tmp_path, **AUTH) as (client, log):
        await log.append([b"secret-ish"])
        await integrated(log, 1)
        refused = await client.get("/logs/calls/leaves/0")
        assert refused.status_code == 401
        assert refused.json()["code"] == "UNAUTHORIZED"
        # Not a call of ada's: an operator reads it, ada does not.
        forbidden = await client.get("/logs/calls/leaves/0", headers=BEARER)
        assert (forbidden.status_code, forbidden.json()["code"]) == (403, "FORBIDDEN")
        assert b"secret-ish" not in forbidden.content
        allowed = await client.get("/logs/calls/leaves/0", headers=OPERATOR)
        assert base64.b64decode(allowed.json()["data"]) == b"secret-ish"
        for path in (
            "/logs/calls/checkpoint",
            "/logs/calls/checkpoint/1",
            "/logs/calls/keys",
            "/logs/calls/receipt/0",
            "/logs/calls/proof/inclusion?index=0&size=1",
        ):
            answer = await client.get(path)
            assert answer.status_code == 200, path
            assert b"secret-ish" not in answer.content


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/logs/other/checkpoint", 404, "LOG_NOT_FOUND"),
        ("/logs/other/receipt/0", 404, "LOG_NOT_FOUND"),
        ("/logs/calls/receipt/3", 404, "BEYOND_LOG"),
        ("/logs/calls/receipt/9223372036854775807", 404, "BEYOND_LOG"),
        ("/logs/calls/leaves/3", 404, "BEYOND_LOG"),
        ("/logs/calls/checkpoint/3", 404, "BEYOND_LOG"),
        ("/logs/calls/checkpoint/18446744073709551615", 404, "BEYOND_LOG"),
        ("/logs/calls/checkpoint/1", 404, "CHECKPOINT_NOT_FOUND"),
        ("/logs/calls/checkpoint/-1", 422, "INVALID_LOG_RANGE"),
        ("/logs/calls/receipt/-1", 422, "INVALID_LOG_RANGE"),
        ("/logs/calls/leaves/-5", 422, "INVALID_LOG_RANGE"),
        ("/logs/calls/checkpoint/" + "9" * 400, 422, "INVALID_LOG_RANGE"),
        ("/logs/calls/checkpoint/18446744073709551616", 422, "INVALID_LOG_RANGE"),
        ("/logs/calls/checkpoint/two", 422, "VALIDATION_FAILED"),
        ("/logs/calls/receipt/18446744073709551616", 422, "INVALID_LOG_RANGE"),
        ("/logs/calls/receipt/" + "9" * 5000, 422, "INVALID_LOG_RANGE"),
        ("/logs/calls/receipt/-" + "9" * 30, 422, "INVALID_LOG_RANGE"),
        # One decimal spelling per number: an immutable checkpoint has one URL.
        ("/logs/calls/checkpoint/+0", 422, "VALIDATION_FAILED"),
        ("/logs/calls/checkpoint/00", 422, "VALIDATION_FAILED"),
        ("/logs/calls/checkpoint/-0", 422, "VALIDATION_FAILED"),
        ("/logs/calls/receipt/1_0", 422, "VALIDATION_FAILED"),
        ("/logs/calls/receipt/%201", 422, "VALIDATION_FAILED"),
        ("/logs/calls/proof/inclusion?index=01&size=2", 422, "VALIDATION_FAILED"),
        ("/logs/calls/proof/consistency?from=1&to=%2B2", 422, "VALIDATION_FAILED"),
        ("/logs/calls/receipt/by-hash/" + "0" * 64, 404, "LEAF_NOT_FOUND"),
        ("/logs/calls/receipt/by-hash/" + "0" * 63, 422, "INVALID_LEAF_HASH"),
        ("/logs/calls/receipt/by-hash/" + "g" * 64, 422, "INVALID_LEAF_HASH"),
        ("/logs/calls/receipt/by-hash/" + "\u0660" * 64, 422, "INVALID_LEAF_HASH"),
        ("/logs/calls/proof/inclusion?index=2&size=2", 422, "INVALID_LOG_RANGE"),
        ("/logs/calls/proof/inclusion?index=0&size=3", 404, "BEYOND_LOG"),
        ("/logs/calls/proof/inclusion?index=-1&size=2", 422, "INVALID_LOG_RANGE"),
        ("/logs/calls/proof/inclusion?index=0", 422, "VALIDATION_FAILED"),
        ("/logs/calls/proof/inclusion?index=1.5&size=2", 422, "VALIDATION_FAILED"),
        ("/logs/calls/proof/consistency?from=2&to=1", 422, "INVALID_LOG_RANGE"),
        ("/logs/calls/proof/consistency?from=1&to=3", 404, "BEYOND_LOG"),
        ("/logs/calls/proof/consistency?from=0&to=3", 404, "BEYOND_LOG"),
        ("/logs/calls/proof/consistency?from=0&to=-3", 422, "INVALID_LOG_RANGE"),
        ("/logs/calls/proof/consistency?from=1&to=2&checkpoints=true", 404, "CHECKPOINT_NOT_FOUND"),
    ],
)
async def test_bad_input_is_a_problem_with_its_code(
    backend: Backend, tmp_path: Path, path: str, status: int, code: str
) -> None:
    async with publishing(backend, tmp_path) as (client, log):
        await log.append([b"a", b"b"])
        await integrated(log, 2)
        answer = await client.get(path, headers=BEARER)
        assert answer.status_code == status, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["code"] == code
