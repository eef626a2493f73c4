"""The gateway's calls log: every governed call is a leaf (``conclave.call/v1``), its answer links
to its receipt, the receipt resolves about a second later and verifies offline, and the leaf
holds hashes of what the call carried, never the values."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import httpx

from conclave.edge_client.receipts import check_receipt
from conclave.gateway import store
from conclave.gateway.call_log import call_entry, canonical_json, receipt_path
from tests.conftest import Backend, eventually
from tests.gateway.conftest import GatewayClient, audit_rows

AUTH = {"auth": "enabled", "api_tokens": "tok-ada=ada,tok-bob=bob"}
BEARER = {"Authorization": "Bearer tok-ada"}


def logged(gateway: GatewayClient, data_dir: Path) -> Any:
    return gateway(call_log=True, data_dir=data_dir, **AUTH)


async def receipt_of(client: httpx.AsyncClient, path: str) -> bytes:
    async def resolved() -> bytes | None:
        answer = await client.get(path)
        return answer.content if answer.status_code == 200 else None

    # The checkpoint covering the call is signed within the checkpoint interval (1 s).
    found: bytes = await eventually(resolved, timeout=60)
    return found


def index_in(receipt: bytes) -> int:
    index: int = json.loads(receipt)["index"]
    return index


async def keys(client: httpx.AsyncClient) -> list[str]:
    return [key["vkey"] for key in (await client.get("/logs/calls/keys")).json()["keys"]]


async def test_a_call_links_to_a_receipt_of_its_audit_facts(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    async with logged(gateway, tmp_path) as client:
        answer = await client.post(
            "/execute",
            json={"tool": "evaluate_expression", "args": {"expression": "6 * 7"}},
            headers=BEARER,
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        hashed = body["log_leaf_hash"]
        assert body["receipt"] == f"/logs/calls/receipt/by-hash/{hashed}"
        row = await store.get_call(backend.engine, body["conclave_id"])
        assert row is not None and row.log_leaf_hash == bytes.fromhex(hashed)
        shown = (await client.get(f"/calls/{body['conclave_id']}", headers=BEARER)).json()
        assert (shown["log_leaf_hash"], shown["receipt"]) == (hashed, body["receipt"])

        receipt = await receipt_of(client, body["receipt"])
        entry = call_entry(row)
        assert hashlib.sha256(b"\x00" + entry).hexdigest() == hashed
        opened = check_receipt(receipt, await keys(client), entry)
        index = index_in(receipt)
        assert opened.checkpoint.size > index
        leaf = (await client.get(f"/logs/calls/leaves/{index}", headers=BEARER)).json()
        assert base64.b64decode(leaf["data"]) == entry

        facts = json.loads(entry)
        assert facts["format"] == "conclave.call/v1"
        assert facts["conclave_id"] == body["conclave_id"]
        assert facts["status"] == "succeeded"
        assert facts["user_sha256"] == hashlib.sha256(b"ada").hexdigest()
        assert facts["args_sha256"] == hashlib.sha256(canonical_json(row.args)).hexdigest()
        assert facts["result_sha256"] == hashlib.sha256(canonical_json(row.result)).hexdigest()
        assert entry == canonical_json(facts)


async def test_rejected_and_failed_calls_are_in_the_log_without_their_values(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    async with logged(gateway, tmp_path) as client:
        requests = [
            {"tool": "login", "args": {"username": "ada", "password": "hunter2-secret"}},
            {"tool": "no_such_tool", "args": {"token": "hunter2-secret"}},
            {"tool": "crash", "args": {}},
        ]
        for request in requests:
            await client.post("/execute", json=request, headers=BEARER)
        rows = await audit_rows(backend)
        assert len(rows) == 3
        indices = []
        for row in rows:
            assert row.log_leaf_hash is not None
            receipt = await receipt_of(client, receipt_path(row.log_leaf_hash))
            indices.append(index_in(receipt))
            leaf = await client.get(f"/logs/calls/leaves/{indices[-1]}", headers=BEARER)
            data = base64.b64decode(leaf.json()["data"])
            facts = json.loads(data)
            assert b"hunter2" not in data and b"username" not in data
            # The user id only hashed ("ada" may occur inside a hex digest, so values compared).
            assert "ada" not in facts.values()
            assert facts["status"] == row.status
            check_receipt(receipt, await keys(client), data)
        assert sorted(indices) == [0, 1, 2]


async def test_a_calls_leaf_is_read_by_its_caller_not_by_another_user(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    """The entry's hashes of arguments with few possible values could be found by guessing, and
    its user hash says whose call it is: another user reads neither."""
    async with logged(gateway, tmp_path) as client:
        call = {"tool": "evaluate_expression", "args": {"expression": "1234 * 5678"}}
        answer = (await client.post("/execute", json=call, headers=BEARER)).json()
        index = index_in(await receipt_of(client, answer["receipt"]))
        path = f"/logs/calls/leaves/{index}"
        mine = await client.get(path, headers=BEARER)
        assert (
            json.loads(base64.b64decode(mine.json()["data"]))["conclave_id"]
            == answer["conclave_id"]
        )
        theirs = await client.get(path, headers={"Authorization": "Bearer tok-bob"})
        assert (theirs.status_code, theirs.json()["code"]) == (403, "FORBIDDEN")
        assert "args_sha256" not in theirs.text and "user_sha256" not in theirs.text


async def test_concurrent_calls_get_distinct_leaves_and_all_verify(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    async with logged(gateway, tmp_path) as client:
        answers = await asyncio.gather(
            *(
                client.post(
                    "/execute",
                    json={"tool": "evaluate_expression", "args": {"expression": f"{n} + 1"}},
                    headers=BEARER,
                )
                for n in range(40)
            )
        )
        assert len({answer.json()["log_leaf_hash"] for answer in answers}) == 40
        verifier_keys = await keys(client)
        indices = []
        for answer in answers:
            body = answer.json()
            row = await store.get_call(backend.engine, body["conclave_id"])
            assert row is not None
            receipt = await receipt_of(client, body["receipt"])
            check_receipt(receipt, verifier_keys, call_entry(row))
            indices.append(index_in(receipt))
        assert sorted(indices) == list(range(40))


async def test_without_the_log_answers_carry_no_receipt(
    backend: Backend, gateway: GatewayClient
) -> None:
    async with gateway() as client:
        answer = await client.post(
            "/execute", json={"tool": "evaluate_expression", "args": {"expression": "1"}}
        )
        assert "receipt" not in answer.json() and "log_leaf_hash" not in answer.json()
        assert (await audit_rows(backend))[0].log_leaf_hash is None
        assert (await client.get("/logs/calls/checkpoint")).json()["code"] == "LOG_NOT_FOUND"


async def test_a_replay_answers_with_the_first_calls_receipt(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    async with gateway(call_log=True, data_dir=tmp_path) as client:
        request = {"tool": "evaluate_expression", "args": {"expression": "2"}}
        headers = {"Idempotency-Key": "once"}
        first = (await client.post("/execute", json=request, headers=headers)).json()
        again = await client.post("/execute", json=request, headers=headers)
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert again.json()["receipt"] == first["receipt"]
        assert len(await audit_rows(backend)) == 1


async def test_an_mcp_tools_call_carries_its_receipt_in_meta(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    headers = {
        **BEARER,
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "evaluate_expression", "arguments": {"expression": "3 * 3"}},
    }
    async with logged(gateway, tmp_path) as client:
        answer = await client.post("/mcp", json=call, headers=headers)
        meta = answer.json()["result"]["_meta"]["conclave"]
        row = await store.get_call(backend.engine, meta["conclave_id"])
        assert row is not None and row.log_leaf_hash is not None
        assert meta["log_leaf_hash"] == row.log_leaf_hash.hex()
        assert meta["receipt"] == receipt_path(row.log_leaf_hash)
        receipt = await receipt_of(client, meta["receipt"])
        check_receipt(receipt, await keys(client), call_entry(row))
