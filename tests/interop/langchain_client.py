"""Load the gateway's MCP tools as LangChain tools with langchain-mcp-adapters and call two.

Run as its own process by the interop tests, in the virtual environment that holds the adapters
(they need SDK 1.x): ``python langchain_client.py URL``. Prints one JSON document: the tool
names LangChain sees, and the ``ToolMessage`` of a successful and a failing call, as an agent
would receive them (the tool calls go through ``ainvoke`` with a tool call, as an agent's tool
node makes them).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from langchain_mcp_adapters.client import MultiServerMCPClient

CALLS = {
    "success": ("echo", {"message": "hello from LangChain"}),
    "failure": ("evaluate_expression", {"expression": "1/0"}),
}


async def run(url: str) -> dict[str, Any]:
    client = MultiServerMCPClient({"conclave": {"transport": "streamable_http", "url": url}})
    tools = {tool.name: tool for tool in await client.get_tools()}
    report: dict[str, Any] = {"tools": sorted(tools)}
    for label, (name, arguments) in CALLS.items():
        call = {"type": "tool_call", "id": f"call-{label}", "name": name, "args": arguments}
        try:
            message = await tools[name].ainvoke(call)
            report[label] = {
                "status": message.status,
                "content": message.content,
                "artifact": message.artifact,
            }
        except Exception as exc:  # recorded: the tests judge each call
            report[label] = {"exception": type(exc).__name__, "message": str(exc)}
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(sys.argv[1])), default=repr))
