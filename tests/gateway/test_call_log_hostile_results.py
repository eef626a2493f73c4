"""A logged call whose result JSON keeps otherwise than Python holds it (tuples, enum, float and
bool keys, -0.0, U+2028) verifies, and its answer names the leaf the log holds; so do a replay's
and a rejection's (outside attack, 2026-11-27)."""

from __future__ import annotations

import base64
import enum
from pathlib import Path
from typing import Any

from conclave.gateway.tools import Tool, ToolContext
from conclave.platform.transparency import leaf_hash
from tests.conftest import Backend, test_settings
from tests.gateway.test_call_log import receipt_of
from tests.gateway.test_call_verify import ADA, AUTH, _verify


class _Key(enum.IntEnum):
    ONE = 1


async def _hostile(_args: dict[str, Any], _ctx: ToolContext) -> Any:
    return {
        "t": (1, (2, 3), {"x": ()}),
        _Key.ONE: "enum key",
        2.5: "float key",
        True: "bool key",
        "big": -(2**63),
        "neg0": -0.0,
        "e": 1e16,
        "nested": [[[[{"d": [None]}]]]],
        "é": "ü\u2028",
    }


HOSTILE = Tool(
    name="hostile_result",
    description="Answers values JSON keeps otherwise than Python holds them.",
    executor=_hostile,
    parameters={"type": "object"},
    annotations={"readOnlyHint": True},
)


async def test_hostile_results_verify_and_the_answer_names_the_logged_leaf(
    backend: Backend, tmp_path: Path
) -> None:
    from tests.gateway.conftest import run_gateway

    settings = test_settings(call_log=True, data_dir=tmp_path, **AUTH)
    async with run_gateway(backend, settings, (HOSTILE,)) as client:
        args = {"k": [1, 2.0, "\u2028", {"1": 1, "10": 2, "2": 3}], "n": 2**63 - 1}
        answer = await client.post(
            "/execute", json={"tool": "hostile_result", "args": args}, headers=ADA
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        document = await receipt_of(client, body["receipt"])
        assert document
        found = await _verify(client, body["conclave_id"])
        assert (found["ok"], found["problem"]) == (True, None), found
        leaf = (await client.get(f"/logs/calls/leaves/{found['log_index']}", headers=ADA)).json()
        assert body["receipt"].endswith(leaf_hash(base64.b64decode(leaf["data"])).hex()), leaf
        # A rejection and a replay answer the receipt of their own row too.
        rejected = await client.post(
            "/execute", json={"tool": "evaluate_expression", "args": {"bad": 1}}, headers=ADA
        )
        assert rejected.status_code in (400, 422), rejected.text
        headers = {**ADA, "Idempotency-Key": "k1"}
        first = (
            await client.post(
                "/execute", json={"tool": "hostile_result", "args": {}}, headers=headers
            )
        ).json()
        again = (
            await client.post(
                "/execute", json={"tool": "hostile_result", "args": {}}, headers=headers
            )
        ).json()
        assert first["receipt"] == again["receipt"]
        await receipt_of(client, first["receipt"])
        replayed = await _verify(client, first["conclave_id"])
        assert (replayed["ok"], replayed["problem"]) == (True, None), replayed
