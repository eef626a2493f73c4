"""The four services and the console on real loopback sockets, authentication on.

Three people: ``alice`` and ``bob`` (users) and ``olga`` (an operator), each with a static token;
HS256 JWTs are accepted too. The services share one embedded store and bus, as under ``conclave
up``; the console reaches them over HTTP like any deployment would.

Starting a stack costs about a second, and stopping it half as much, so the tests that only read,
or write under names no other test looks at, share one per module (``shared_stack``,
``shared_gateway_stack``). Such a module runs its tests on the module's event loop, where the
shared stack's servers run: ``pytestmark = pytest.mark.asyncio(loop_scope="module")``. A test whose
assertions need an empty store (all that a user or an operator sees, exactly) keeps a fresh stack
(``stack``, ``gateway_stack``) on a loop of its own:
``@pytest.mark.asyncio(loop_scope="function")``, with the reason.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import pytest_asyncio

from conclave.console.app import create_app as create_console
from conclave.platform.bus.memory import MemoryBus
from conclave.platform.db.engine import create_engine
from conclave.platform.runtime import Platform
from conclave.settings import ConsoleSettings
from tests.conftest import Backend
from tests.hostile.conftest import JWT_SECRET, build_app, service_settings
from tests.hostile.conftest import embedded as embedded  # the fixture, for these tests too
from tests.httpserver import running_server

TOKENS = {"alice": "alice-token", "bob": "bob-token", "olga": "olga-token"}
TOKEN_TABLE = ",".join(f"{token}={user}" for user, token in TOKENS.items())
SERVICES = ("gateway", "collector", "graph", "edge")


def credential_of(user: str) -> str:
    """What ``user`` signs in and calls with: their static token, or for any other name a JWT (a
    user of a test's own, whom no other test sharing its stack knows)."""
    return TOKENS[user] if user in TOKENS else user_jwt(user)


def auth(user: str) -> dict[str, str]:
    """The header a user's API calls carry."""
    return {"Authorization": f"Bearer {credential_of(user)}"}


def user_jwt(user: str, lifetime: float = 3600, **claims: Any) -> str:
    """A JWT the services accept for ``user``."""
    now = int(time.time())
    body = {"sub": user, "iat": now, "exp": now + int(lifetime), **claims}
    return jwt.encode(body, JWT_SECRET, "HS256")


@dataclass
class Stack:
    """Where everything listens."""

    urls: dict[str, str]
    console: str
    backend: Backend

    async def call_tool(self, user: str, tool: str, args: dict[str, Any], **headers: str) -> Any:
        """A tool call through the gateway's API, as ``user``; its JSON answer."""
        async with httpx.AsyncClient(base_url=self.urls["gateway"]) as client:
            answer = await client.post(
                "/execute", json={"tool": tool, "args": args}, headers={**auth(user), **headers}
            )
        return answer.json()


@asynccontextmanager
async def open_stack(
    backend: Backend,
    data_dir: Path,
    services: tuple[str, ...] = SERVICES,
    per_service: dict[str, dict[str, Any]] | None = None,
    tool_modules: tuple[str, ...] = (),
    **console: Any,
) -> AsyncIterator[Stack]:
    """Start ``services`` (the gateway with the plug-in ``tool_modules`` too) and the console;
    yields when all listen. ``per_service`` adds settings of one service
    (``{"collector": {"run_workers": True}}``)."""
    overrides: dict[str, Any] = {
        "api_tokens": TOKEN_TABLE,
        "operators": ["olga"],
        "auto_migrate": False,
        "tool_modules": list(tool_modules),
        # Every call in the transparency log, checkpoints signed quickly: a call's page shows
        # its verification.
        "call_log": True,
        "tlog_checkpoint_interval_seconds": 0.2,
    }
    async with AsyncExitStack() as stack:
        settings = service_settings("gateway", data_dir, **overrides)
        platform = await stack.enter_async_context(
            Platform.open(settings, engine=backend.engine, bus=backend.bus)
        )
        urls: dict[str, str] = {}
        for name in services:
            extra = {**overrides, **(per_service or {}).get(name, {})}
            app = build_app(name, service_settings(name, data_dir, **extra), platform)
            urls[name] = await stack.enter_async_context(running_server(app))
        closed = "http://127.0.0.1:9"
        console_settings = ConsoleSettings(
            gateway_url=urls.get("gateway", closed),
            collector_url=urls.get("collector", closed),
            graph_url=urls.get("graph", closed),
            edge_url=urls.get("edge", closed),
            data_dir=data_dir,
            # A budget no loaded machine runs out of: these stacks' services are real and
            # answer; a page showing one as "did not answer in time" only because CI's cores
            # were busy fails a test about something else. The tests of the budget itself give
            # their own (``upstream_timeout_seconds=`` here, or to ConsoleSettings).
            **{"upstream_timeout_seconds": 60.0, **console},
        )
        console_app = create_console(console_settings)
        console_url = await stack.enter_async_context(running_server(console_app))
        yield Stack(urls, console_url, backend)


@pytest.fixture
async def stack(embedded: Backend, tmp_path: Path) -> AsyncIterator[Stack]:
    """The four services and the console."""
    async with open_stack(embedded, tmp_path) as running:
        yield running


@pytest.fixture
async def gateway_stack(embedded: Backend, tmp_path: Path) -> AsyncIterator[Stack]:
    """The gateway and the console only (the other services unreachable)."""
    async with open_stack(embedded, tmp_path, services=("gateway",)) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_embedded(
    tmp_path_factory: pytest.TempPathFactory, migrated_sqlite: Path
) -> AsyncIterator[Backend]:
    """``embedded`` for a whole module: one SQLite store (a copy of the migrated one) and one
    in-process bus, on the module's event loop."""
    path = tmp_path_factory.mktemp("shared-store") / "conclave.db"
    shutil.copyfile(migrated_sqlite, path)
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        yield Backend("embedded", engine, MemoryBus(claim_idle_seconds=0.5))
    finally:
        await engine.dispose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_stack(
    shared_embedded: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """The four services and the console, shared by a module's tests."""
    async with open_stack(shared_embedded, tmp_path_factory.mktemp("shared-stack")) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_gateway_stack(
    shared_embedded: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """The gateway and the console only, shared by a module's tests."""
    data_dir = tmp_path_factory.mktemp("shared-gateway-stack")
    async with open_stack(shared_embedded, data_dir, services=("gateway",)) as running:
        yield running
