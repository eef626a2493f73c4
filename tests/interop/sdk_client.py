"""A small MCP client on the official Python SDK, run as its own process by the interop tests.

It runs unchanged on SDK 1.x (in the interop suite's own virtual environment) and on SDK 2.x
(the project's), at the protocol version named on the command line:

    python sdk_client.py URL PROTOCOL_VERSION [BEARER_TOKEN]

and prints one JSON document: the negotiated version, the tool list and four calls (a success, a
tool failure, invalid arguments, an unknown tool), each as the SDK parsed it, dumped with the
wire's field names. A step that raises is recorded as ``{"exception": ..., "message": ...}`` so
one broken step does not hide the others.

The SDK's own ``initialize()`` always offers its newest handshake version; for an older one the
script sends the same ``initialize`` request itself through the session's public
``send_request`` with that version (SDK 2.x then ``adopt``s the result, as ``initialize()`` does).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from importlib.metadata import version as installed_version
from typing import Any

from mcp import ClientSession, types

SDK_VERSION = installed_version("mcp")
SDK_MAJOR = int(SDK_VERSION.split(".")[0])
MODERN_VERSIONS = ("2026-07-28",)

CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "success": ("echo", {"message": "hello from the Python SDK"}),
    "failure": ("evaluate_expression", {"expression": "1/0"}),
    "invalid": ("echo", {"message": 42}),
    "unknown": ("no_such_tool", {}),
}


def dump(model: Any) -> Any:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


async def step(action: Callable[[], Awaitable[Any]]) -> Any:
    try:
        return dump(await action())
    except Exception as exc:  # recorded, not raised: the tests judge each step
        error = getattr(exc, "error", None)
        code = getattr(error, "code", None)
        return {"exception": type(exc).__name__, "message": str(exc), "code": code}


async def exercise(session: Any, negotiated: str) -> dict[str, Any]:
    report: dict[str, Any] = {"sdk": SDK_VERSION, "protocol_version": negotiated}
    report["tools"] = await step(session.list_tools)
    for label, (name, arguments) in CALLS.items():
        report[label] = await step(lambda n=name, a=arguments: session.call_tool(n, a))
    return report


def initialize_request(protocol_version: str) -> Any:
    if SDK_MAJOR == 1:
        params = types.InitializeRequestParams(
            protocolVersion=protocol_version,
            capabilities=types.ClientCapabilities(),
            clientInfo=types.Implementation(name="conclave-interop", version=SDK_VERSION),
        )
        return types.ClientRequest(types.InitializeRequest(params=params))
    params = types.InitializeRequestParams(
        protocol_version=protocol_version,
        capabilities=types.ClientCapabilities(),
        client_info=types.Implementation(name="conclave-interop", version=SDK_VERSION),
    )
    return types.InitializeRequest(params=params)


async def handshake(session: Any, protocol_version: str) -> str:
    """The ``initialize`` exchange at ``protocol_version``; returns the version the server chose."""
    result = await session.send_request(
        initialize_request(protocol_version), types.InitializeResult
    )
    if SDK_MAJOR == 1:
        notification = types.ClientNotification(types.InitializedNotification())
        await session.send_notification(notification)
        return str(result.protocolVersion)
    session.adopt(result)
    await session.send_notification(types.InitializedNotification())
    return str(result.protocol_version)


async def run_sdk1(url: str, protocol_version: str, headers: dict[str, str]) -> dict[str, Any]:
    import httpx
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        return await exercise(session, await handshake(session, protocol_version))


async def run_sdk2(url: str, protocol_version: str, headers: dict[str, str]) -> dict[str, Any]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        if protocol_version in MODERN_VERSIONS:
            # The stateless per-request protocol has no handshake: the high-level client adopts it.
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode=protocol_version) as client:
                return await exercise(client, client.protocol_version)
        async with (
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            return await exercise(session, await handshake(session, protocol_version))


def main() -> None:
    url, protocol_version = sys.argv[1], sys.argv[2]
    headers = {"Authorization": f"Bearer {sys.argv[3]}"} if len(sys.argv) > 3 else {}
    run = run_sdk1 if SDK_MAJOR == 1 else run_sdk2
    print(json.dumps(asyncio.run(run(url, protocol_version, headers))))


if __name__ == "__main__":
    main()
