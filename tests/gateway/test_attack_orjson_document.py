"""Odd argument values through POST /execute, sent together with ordinary calls so that they share
group commits (whose rows travel to PostgreSQL as one JSON document): every call is answered (no
500), every ordinary call succeeds, and every stored call reads back and verifies as answered."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Backend, eventually, test_settings
from tests.gateway.conftest import run_gateway

_BODIES = [
    '{"tool":"echo","args":{"message":"\\ud800"}}',
    '{"tool":"echo","args":{"message":"a\\u0000b"}}',
    '{"tool":"echo","args":{"message":"\u2028\u2029 \\" \\\\ \\"\\\\ \\ud83d\\ude00"}}',
    '{"tool":"echo","args":{"text":"\\ud800"}}',
    '{"tool":"echo","args":{"text":"a\\u0000b"}}',
    '{"tool":"echo","args":{"n":' + "9" * 400 + "}}",
    '{"tool":"echo","args":{"n":18446744073709551616,"m":-9223372036854775809}}',
    '{"tool":"echo","args":{"f":5e-324,"g":1e308,"h":-0.0,"i":1e16,"j":1e400}}',
    '{"tool":"echo","args":{"n":NaN}}',
    '{"tool":"echo","args":{"n":Infinity}}',
    '{"tool":"echo","args":{"d":' + "[" * 300 + "]" * 300 + "}}",
    '{"tool":"echo","args":{"t":"\u2028\u2029 \\" \\\\ \\"\\\\"}}',
    '{"tool":"echo","args":{"a":1,"a":2}}',
    '{"tool":"echo","args":{"text":"' + "x" * 200_000 + '"}}',
    '{"tool":"echo\\u0000","args":{}}',
    '{"tool":"echo\\ud800","args":{}}',
]


@pytest.mark.parametrize("backend", ["production"], indirect=True)
async def test_odd_arguments_do_not_fail_neighbours(backend: Backend, tmp_path: Path) -> None:
    settings = test_settings(call_log=True, data_dir=tmp_path)
    async with run_gateway(backend, settings) as client:
        headers = {"content-type": "application/json"}

        async def odd(body: str) -> Any:
            return await client.post(
                "/execute", content=body.encode("utf-8", "surrogatepass"), headers=headers
            )

        async def plain(n: int) -> Any:
            return await client.post(
                "/execute", json={"tool": "echo", "args": {"message": f"p{n}"}}
            )

        answers = await asyncio.wait_for(
            asyncio.gather(*(odd(b) for b in _BODIES), *(plain(n) for n in range(20))), 60
        )
        for body, answer in zip(_BODIES + ["plain"] * 20, answers, strict=True):
            assert answer.status_code != 500, (body[:80], answer.text[:300])
            assert answer.headers["content-type"].startswith(
                ("application/json", "application/problem+json")
            ), (body[:80], answer.headers["content-type"])
        for answer in answers[len(_BODIES) :]:
            assert answer.status_code == 200, answer.text
        stored = [a.json() for a in answers if "conclave_id" in a.json()]
        for answer in stored:
            got = await client.get(f"/calls/{answer['conclave_id']}")
            assert got.status_code == 200, got.text
            assert got.json().get("result") == answer.get("result"), answer["conclave_id"]

        async def verified(conclave_id: str) -> Any:
            found = (await client.get(f"/calls/{conclave_id}/verify")).json()
            return found if found.get("log_index") is not None else None

        for conclave_id in [answer["conclave_id"] for answer in stored]:
            found = await eventually(functools.partial(verified, conclave_id), timeout=60)
            assert found["ok"] is True and found["problem"] is None, found
