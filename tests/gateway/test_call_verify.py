"""``GET /calls/{id}/verify``: a call's audit row checked against the transparency log. Editing,
inserting or deleting a call directly in the store is caught, by the endpoint or by the receipt
the caller kept and verifies offline."""

from __future__ import annotations

import base64
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text, update

from conclave.edge_client.receipts import check_receipt
from conclave.gateway import store
from conclave.gateway.call_log import call_entry
from conclave.gateway.store import mcp_tool_calls
from conclave.gateway.tools import Tool, ToolContext
from conclave.platform.clock import utc_now
from conclave.platform.transparency import leaf_hash
from tests.conftest import Backend, test_settings
from tests.gateway.conftest import GatewayClient, run_gateway
from tests.gateway.test_call_log import index_in, keys, receipt_of

AUTH = {
    "auth": "enabled",
    "api_tokens": "tok-ada=ada,tok-bob=bob,tok-root=root",
    "operators": "root",
}
ADA = {"Authorization": "Bearer tok-ada"}
BOB = {"Authorization": "Bearer tok-bob"}
ROOT = {"Authorization": "Bearer tok-root"}


async def _odd_keys(_args: dict[str, Any], _ctx: ToolContext) -> dict[Any, Any]:
    # Keys JSON keeps as strings: numbers that sort otherwise once stored, and mixed types.
    return {"m": {2: "two", 10: "ten"}, 1: "one", "b": 2.5}


ODD_KEYS = Tool(
    name="odd_keys",
    description="Answers a mapping whose keys are not all strings.",
    executor=_odd_keys,
    parameters={"type": "object", "additionalProperties": False},
    annotations={"readOnlyHint": True},
)


async def _logged_call(client: httpx.AsyncClient, expression: str = "6 * 7") -> dict[str, Any]:
    """A call of ada's, once it is under a signed checkpoint."""
    call = {"tool": "evaluate_expression", "args": {"expression": expression}}
    answer: dict[str, Any] = (await client.post("/execute", json=call, headers=ADA)).json()
    answer["receipt_document"] = await receipt_of(client, answer["receipt"])
    return answer


async def _verify(client: httpx.AsyncClient, conclave_id: str, headers: Any = ADA) -> Any:
    return (await client.get(f"/calls/{conclave_id}/verify", headers=headers)).json()


async def _edit_row(backend: Backend, conclave_id: str, **values: Any) -> None:
    async with backend.engine.begin() as connection:
        await connection.execute(
            update(mcp_tool_calls)
            .where(mcp_tool_calls.c.conclave_id == conclave_id)
            .values(**values)
        )


async def test_an_untouched_call_verifies_under_the_latest_checkpoint(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    async with gateway(call_log=True, data_dir=tmp_path, **AUTH) as client:
        answer = await _logged_call(client)
        found = await _verify(client, answer["conclave_id"])
        assert found["ok"] is True and found["problem"] is None
        assert found["log_index"] == index_in(answer["receipt_document"])
        assert found["checkpoint_size"] >= 1
        assert found["receipt"] == answer["receipt"]
        # Only the caller and operators may ask.
        assert (await _verify(client, answer["conclave_id"], ROOT))["ok"] is True
        refused = await client.get(f"/calls/{answer['conclave_id']}/verify", headers=BOB)
        assert (refused.status_code, refused.json()["code"]) == (404, "CALL_NOT_FOUND")


async def test_a_row_edited_in_the_store_is_caught(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    async with gateway(call_log=True, data_dir=tmp_path, **AUTH) as client:
        answer = await _logged_call(client)
        conclave_id = answer["conclave_id"]
        await _edit_row(backend, conclave_id, result={"value": 41})
        assert (await _verify(client, conclave_id))["problem"] == "row_modified"

        # A careful editor also rewrites the recorded leaf hash to match the edited row: no leaf
        # of that hash is in the log.
        row = await store.get_call(backend.engine, conclave_id)
        assert row is not None
        row.completed_at = utc_now() - timedelta(hours=1)
        await _edit_row(
            backend,
            conclave_id,
            completed_at=row.completed_at,
            log_leaf_hash=leaf_hash(call_entry(row)),
        )
        found = await _verify(client, conclave_id)
        assert (found["ok"], found["problem"]) == (False, "missing_from_log")


async def test_a_call_inserted_in_the_store_is_caught(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    async with gateway(call_log=True, data_dir=tmp_path, **AUTH) as client:
        answer = await _logged_call(client)
        row = await store.get_call(backend.engine, answer["conclave_id"])
        assert row is not None
        row.conclave_id = "00000000-0000-4000-8000-00000000f00d"
        row.created_at = row.completed_at = utc_now() - timedelta(hours=1)
        row.log_leaf_hash = leaf_hash(call_entry(row))
        async with backend.engine.begin() as connection:
            await connection.execute(mcp_tool_calls.insert(), [dict(store.record_call(row).values)])
        found = await _verify(client, row.conclave_id)
        assert (found["ok"], found["problem"]) == (False, "missing_from_log")


async def test_a_deleted_call_is_still_proven_by_the_receipt_its_caller_kept(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    async with gateway(call_log=True, data_dir=tmp_path, **AUTH) as client:
        answer = await _logged_call(client)
        index = index_in(answer["receipt_document"])
        leaf = await client.get(f"/logs/calls/leaves/{index}", headers=ADA)
        entry = base64.b64decode(leaf.json()["data"])
        verifier_keys = await keys(client)
        async with backend.engine.begin() as connection:
            await connection.execute(
                mcp_tool_calls.delete().where(mcp_tool_calls.c.conclave_id == answer["conclave_id"])
            )
        gone = await client.get(f"/calls/{answer['conclave_id']}/verify", headers=ADA)
        assert gone.status_code == 404
        # The receipt, checked offline with the log's key, proves the call the row no longer shows.
        opened = check_receipt(answer["receipt_document"], verifier_keys, entry)
        assert opened.checkpoint.size > index


async def test_an_edited_leaf_is_caught(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    async with gateway(call_log=True, data_dir=tmp_path, **AUTH) as client:
        answer = await _logged_call(client)
        index = index_in(answer["receipt_document"])
        async with backend.engine.begin() as connection:
            if backend.engine.dialect.name == "sqlite":
                await connection.execute(text("DROP TRIGGER tlog_leaves_no_update"))
            else:  # the append-only trigger is bypassed as a superuser could
                await connection.execute(text("SET LOCAL session_replication_role = replica"))
            await connection.execute(
                text("UPDATE tlog_leaves SET data = :data WHERE leaf_index = :index"),
                {"data": b"{}", "index": index},
            )
        found = await _verify(client, answer["conclave_id"])
        assert (found["ok"], found["problem"]) == (False, "leaf_modified")


async def test_a_call_made_without_the_log_says_so(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    async with gateway(call_log=True, data_dir=tmp_path, **AUTH) as client:
        answer = await _logged_call(client)
        await _edit_row(backend, answer["conclave_id"], log_leaf_hash=None)
        found = await _verify(client, answer["conclave_id"])
        assert (found["ok"], found["problem"]) == (False, "not_logged")


async def test_a_result_with_keys_json_keeps_as_strings_is_logged_and_verifies(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    """Numbers and mixed types as keys: the entry hashes the result as the store keeps it
    (string keys), so the honest row verifies, and making the entry never fails the call."""
    settings = test_settings(call_log=True, data_dir=tmp_path, **AUTH)
    async with run_gateway(backend, settings, (ODD_KEYS,)) as client:
        answer = await client.post("/execute", json={"tool": "odd_keys", "args": {}}, headers=ADA)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["result"] == {"m": {"2": "two", "10": "ten"}, "1": "one", "b": 2.5}
        await receipt_of(client, body["receipt"])
        found = await _verify(client, body["conclave_id"])
        assert (found["ok"], found["problem"]) == (True, None)


async def test_every_field_shown_to_the_caller_is_covered(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    edits = {
        "error_message": "edited",
        "warnings": ["edited"],
        "canonical_args": {"expression": "1 + 1"},
        "correlation_id": "edited",
        "duration_ms": 0.5,
        "status": "failed",
        "args": {"expression": "1 + 1"},
    }
    async with gateway(call_log=True, data_dir=tmp_path, **AUTH) as client:
        for column, value in edits.items():
            answer = await _logged_call(client)
            await _edit_row(backend, answer["conclave_id"], **{column: value})
            found = await _verify(client, answer["conclave_id"])
            assert found["problem"] == "row_modified", column


async def test_a_row_dated_in_the_future_is_missing_not_pending(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    async with gateway(call_log=True, data_dir=tmp_path, **AUTH) as client:
        answer = await _logged_call(client)
        row = await store.get_call(backend.engine, answer["conclave_id"])
        assert row is not None
        row.completed_at = utc_now() + timedelta(days=3650)
        await _edit_row(
            backend,
            row.conclave_id,
            completed_at=row.completed_at,
            log_leaf_hash=leaf_hash(call_entry(row)),
        )
        found = await _verify(client, row.conclave_id)
        assert (found["ok"], found["problem"]) == (False, "missing_from_log")


async def test_a_call_behind_a_queue_backlog_is_not_yet_logged(
    backend: Backend, gateway: GatewayClient, tmp_path: Path
) -> None:
    """The integrator behind (an outage): an old call still waiting in the queue is not yet
    logged, not missing (every honest call would otherwise look forged)."""
    # The integrator's poll kept away: the hand-queued row must still wait when verify looks.
    async with gateway(call_log=True, data_dir=tmp_path, tlog_poll_seconds=3600, **AUTH) as client:
        answer = await _logged_call(client)
        row = await store.get_call(backend.engine, answer["conclave_id"])
        assert row is not None
        # An hour-old call whose entry waits in the queue (queued an hour ago).
        row.conclave_id = "00000000-0000-4000-8000-00000000beef"
        row.created_at = row.completed_at = utc_now() - timedelta(hours=1)
        entry = call_entry(row)
        row.log_leaf_hash = leaf_hash(entry)
        async with backend.engine.begin() as connection:
            await connection.execute(mcp_tool_calls.insert(), [dict(store.record_call(row).values)])
            await connection.execute(
                text(
                    "INSERT INTO tlog_queue (log_id, leaf_hash, data, queued_at) "
                    "SELECT log_id, :hash, :data, :at FROM tlog_logs WHERE name = 'calls'"
                ),
                {"hash": row.log_leaf_hash, "data": b"an older leaf", "at": row.completed_at},
            )
        found = await _verify(client, row.conclave_id)
        assert (found["ok"], found["problem"]) == (False, "not_yet_logged")
