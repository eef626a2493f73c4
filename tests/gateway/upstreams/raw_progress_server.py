"""A raw (no SDK) stdio MCP server for tests/gateway/upstreams/test_attack_relay.py: it writes
JSON-RPC lines itself, so it can send numbers no SDK server would.

Tools: ``huge_progress`` (a progress of 10**400 for the call's token, then ``done``) and
``slow_ok`` (answers ``slept`` after 1.5 s)."""

from __future__ import annotations

import asyncio
import json
import sys

OBJECT = {"type": "object", "properties": {"rest": {"type": "string"}}}


def write(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def answer(request_id: object, result: object) -> None:
    write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}))


async def call(message: dict) -> None:
    params = message.get("params") or {}
    name = params.get("name")
    token = (params.get("_meta") or {}).get("progressToken")
    if name == "huge_progress" and token is not None:
        # `rest`: the raw JSON text of the params after the token (default: a 10**400 progress).
        rest = (params.get("arguments") or {}).get("rest") or '"progress":1' + "0" * 400
        write(
            '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":'
            + json.dumps(token)
            + ","
            + rest
            + "}}"
        )
        await asyncio.sleep(0.5)
    if name == "slow_ok":
        await asyncio.sleep(1.5)
    answer(message["id"], {"content": [{"type": "text", "text": f"{name} done"}]})


async def main() -> None:
    loop = asyncio.get_running_loop()
    tasks = set()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        message = json.loads(line)
        method = message.get("method")
        if method == "initialize":
            answer(
                message["id"],
                {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "raw", "version": "0"},
                },
            )
        elif method == "tools/list":
            answer(
                message["id"],
                {
                    "tools": [
                        {"name": n, "description": n, "inputSchema": OBJECT}
                        for n in ("huge_progress", "slow_ok")
                    ]
                },
            )
        elif method == "tools/call":
            task = asyncio.create_task(call(message))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        elif "id" in message:
            answer(message["id"], {})


if __name__ == "__main__":
    asyncio.run(main())
