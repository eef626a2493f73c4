"""Shared fixtures: isolated stores and buses on SQLite/in-memory and on real PostgreSQL/Redis.

Integration tests use the PostgreSQL and Redis servers on this machine (override with
``CONCLAVE_TEST_POSTGRES_URL`` / ``CONCLAVE_TEST_REDIS_URL``). Each test gets its own PostgreSQL
schema and its own Redis key prefix. When a server is missing the test is skipped with the reason,
unless ``CONCLAVE_REQUIRE_SERVICES=1`` (CI), where it fails instead.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import shutil
import ssl
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx._transports.default as httpx_transports
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.bus.base import EventBus
from conclave.platform.bus.memory import MemoryBus
from conclave.platform.bus.redis_streams import RedisStreamsBus
from conclave.platform.db.engine import create_engine
from conclave.platform.db.migrate import migrate
from conclave.platform.logs import JsonFormatter
from conclave.platform.runtime import Platform
from conclave.settings import GatewaySettings

POSTGRES_URL = os.environ.get(
    "CONCLAVE_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("CONCLAVE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
REQUIRE_SERVICES = os.environ.get("CONCLAVE_REQUIRE_SERVICES") == "1"


def missing_service(reason: str) -> None:
    """Skip (locally) or fail (CI) a test whose server is not running."""
    if REQUIRE_SERVICES:
        pytest.fail(f"{reason} (CONCLAVE_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


@pytest.fixture(scope="session", autouse=True)
def one_default_ssl_context() -> Iterator[None]:
    """Every ``httpx`` client made with the default ``verify=True`` shares one SSL context.

    httpx builds a context from certifi's bundle for each client it makes, even one that only
    ever speaks plain HTTP to loopback: 40 to 80 ms of parsing certificates each time, and the
    tests (with the consoles and services they start) make hundreds of clients; that was a fifth
    of the console tests' time. The shared context is the one httpx would build (same bundle,
    same settings), made once per set of ``SSL_CERT_FILE``/``SSL_CERT_DIR`` (and once for the
    clients that read no environment); a client given its own ``verify`` or ``cert`` gets exactly
    what it asked for."""
    made = httpx_transports.create_ssl_context
    contexts: dict[tuple[str | None, str | None], ssl.SSLContext] = {}

    def shared(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
        if verify is not True or cert is not None:
            return made(verify=verify, cert=cert, trust_env=trust_env)
        # Without trust_env (the console's clients) httpx reads neither variable.
        key = (
            (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
            if trust_env
            else ("certifi", "certifi")
        )
        if key not in contexts:
            contexts[key] = made(verify=verify, cert=cert, trust_env=trust_env)
        return contexts[key]

    httpx_transports.create_ssl_context = shared
    yield
    httpx_transports.create_ssl_context = made


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store migrated to head once for the session, which ``sqlite_engine`` copies:
    running the migrations for every test cost more than the copy of the file they make."""
    path = tmp_path_factory.mktemp("migrated") / "conclave.db"

    async def _migrate() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{path}")
        try:
            await migrate(engine)
        finally:
            await engine.dispose()  # the last connection closed: the WAL is folded into the file

    asyncio.run(_migrate())
    return path


@pytest.fixture
async def sqlite_engine(tmp_path: Any, migrated_sqlite: Path) -> AsyncIterator[AsyncEngine]:
    """A migrated SQLite store in a temporary folder (a copy of ``migrated_sqlite``)."""
    path = tmp_path / "conclave.db"
    await asyncio.to_thread(shutil.copyfile, migrated_sqlite, path)
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    yield engine
    await engine.dispose()


_TEMPLATE = f"m_{uuid.uuid4().hex[:12]}"
_migrated_schema: list[str] = []  # pg_dump of a schema migrated to head ("" when unavailable)


async def _dump_of_a_migrated_schema(admin: AsyncEngine) -> str:
    """The SQL that rebuilds a schema migrated to head (tables, triggers, functions, rows), named
    ``_TEMPLATE``; "" where ``pg_dump`` cannot make it (the tests then migrate each schema).

    Migrating a schema takes 0.4 to 1 s (fifteen Alembic revisions, under an advisory lock other
    test processes wait on too); running this SQL takes about 0.15 s, and some 450 tests start
    a PostgreSQL store."""
    async with admin.begin() as connection:
        await connection.execute(text(f'CREATE SCHEMA "{_TEMPLATE}"'))
    engine = create_engine(POSTGRES_URL, schema=_TEMPLATE)
    try:
        await migrate(engine)
        await engine.dispose()
        url = POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://", 1)
        command = ["pg_dump", "--dbname", url, "--schema", _TEMPLATE, "--no-owner",
                   "--no-privileges", "--inserts"]  # fmt: skip
        dumped = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
    except FileNotFoundError:  # no pg_dump on this machine
        return ""
    finally:
        await engine.dispose()
        async with admin.begin() as connection:
            await connection.execute(text(f'DROP SCHEMA "{_TEMPLATE}" CASCADE'))
    if dumped.returncode != 0 or f"CREATE SCHEMA {_TEMPLATE};" not in dumped.stdout:
        return ""
    # psql's meta-commands (\restrict) are no SQL; the rest runs as one script.
    return "\n".join(line for line in dumped.stdout.splitlines() if not line.startswith("\\"))


async def _create_migrated_schema(admin: AsyncEngine, engine: AsyncEngine, schema: str) -> None:
    """Schema ``schema`` at head: a copy of the dumped one, or migrated where there is none."""
    if not _migrated_schema:
        _migrated_schema.append(await _dump_of_a_migrated_schema(admin))
    if not _migrated_schema[0]:
        async with admin.begin() as connection:
            await connection.execute(text(f'CREATE SCHEMA "{schema}"'))
        await migrate(engine)
        return
    # The dump's SET commands (an empty search_path among them) stay on a connection of its own.
    copier = create_engine(POSTGRES_URL, pool_size=1)
    try:
        async with copier.connect() as connection:
            raw = await connection.get_raw_connection()
            await raw.driver_connection.execute(_migrated_schema[0].replace(_TEMPLATE, schema))
            await connection.commit()
    finally:
        await copier.dispose()


@asynccontextmanager
async def isolated_postgres(engine_url: str = POSTGRES_URL) -> AsyncIterator[AsyncEngine]:
    """A migrated PostgreSQL store in a schema of its own (reached through ``engine_url``, e.g. a
    proxy), dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL)
    try:
        async with admin.connect() as connection:
            await connection.execute(text("SELECT 1"))
    except Exception as exc:  # any failure to reach the server means "missing"
        await admin.dispose()
        missing_service(f"PostgreSQL not reachable at {POSTGRES_URL}: {type(exc).__name__}")
    engine = create_engine(engine_url, schema=schema)
    try:
        await _create_migrated_schema(admin, engine, schema)
        yield engine
    finally:
        await engine.dispose()
        async with admin.begin() as connection:
            await connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        await admin.dispose()


@pytest.fixture
async def postgres_engine() -> AsyncIterator[AsyncEngine]:
    """A migrated PostgreSQL store in a schema of its own, dropped afterwards."""
    async with isolated_postgres() as engine:
        yield engine


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix that isolates this test's streams."""
    return f"test:{uuid.uuid4().hex[:12]}:"


@pytest.fixture
async def redis_client(redis_prefix: str) -> AsyncIterator[Redis]:
    """A raw Redis client (for assertions on streams); deletes the test's keys afterwards."""
    client = Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        await client.ping()
    except Exception as exc:
        await client.aclose()
        missing_service(f"Redis not reachable at {REDIS_URL}: {type(exc).__name__}")
    yield client
    keys = [key async for key in client.scan_iter(match=f"{redis_prefix}*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture
async def redis_bus(redis_client: Redis, redis_prefix: str) -> AsyncIterator[RedisStreamsBus]:
    """The Redis Streams bus on this test's prefix, with a short reclaim idle time."""
    bus = RedisStreamsBus(REDIS_URL, stream_prefix=redis_prefix, claim_idle_seconds=0.5)
    yield bus
    await bus.close()


@pytest.fixture
def memory_bus() -> MemoryBus:
    """The in-process bus with a short reclaim idle time."""
    return MemoryBus(claim_idle_seconds=0.5)


@dataclass
class Backend:
    """A store + bus pair to run a test against."""

    name: str
    engine: AsyncEngine
    bus: EventBus


@pytest.fixture(params=["embedded", "production"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Every test using this runs twice: SQLite + in-process bus, and PostgreSQL + Redis."""
    if request.param == "embedded":
        engine = request.getfixturevalue("sqlite_engine")
        bus = request.getfixturevalue("memory_bus")
    else:
        engine = request.getfixturevalue("postgres_engine")
        bus = request.getfixturevalue("redis_bus")
    return Backend(request.param, engine, bus)


def test_settings(**overrides: Any) -> GatewaySettings:
    """Gateway settings for tests: no migration at startup (fixtures migrate), fast relay."""
    values: dict[str, Any] = {
        "auto_migrate": False,
        "auth": "disabled",
        "outbox_poll_seconds": 0.05,
        "outbox_max_backoff_seconds": 0.2,
        "load_entry_points": False,
        # The calls log is tested where it is the subject (tests/gateway/test_call_log.py), with a
        # data folder of the test's own for its embedded key.
        "call_log": False,
    }
    values.update(overrides)
    return GatewaySettings(**values)


test_settings.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


@asynccontextmanager
async def open_platform(
    backend: Backend, settings: GatewaySettings | None = None
) -> AsyncIterator[Platform]:
    """A platform over the backend's engine and bus (owned by the fixtures)."""
    async with Platform.open(
        settings or test_settings(), engine=backend.engine, bus=backend.bus
    ) as platform:
        yield platform


@asynccontextmanager
async def serve_app(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Run ``app``'s lifespan and give an HTTP client talking to it in-process."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie not reaped yet counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers signals until its parent reaps it.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def eventually(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Poll an async ``check`` until it returns a truthy value; fail after ``timeout`` seconds.
    A wait for what will happen costs nothing more for being long, and CI's machine can be
    several times slower than a developer's: give what a loaded machine needs (30-60 s), not
    what a fast one takes."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value: {value!r})")
        await asyncio.sleep(0.05)


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """What is logged (level INFO and up) while the test runs, as the JSON lines a deployment
    writes; :func:`log_lines` parses them."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


def log_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    """The JSON log lines captured by :func:`json_logs`."""
    return [json.loads(text) for text in stream.getvalue().splitlines()]


# The real-file corpus table (tests/edge/test_real_corpus.py) is printed at the end of the run.
# These hooks live here, not in tests/edge/conftest.py, because under pytest-xdist only this
# conftest is loaded by the process that prints: each test process sends its rows when it ends.
_CORPUS_ROWS = "edge_corpus_rows"
_received_corpus_rows: list[dict[str, list[tuple[str, str, list[str]]]]] = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist test process
        from tests.edge.corpus.report import plain_rows

        workeroutput[_CORPUS_ROWS] = plain_rows()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    _received_corpus_rows.append(getattr(node, "workeroutput", {}).get(_CORPUS_ROWS, {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.edge.corpus.report import plain_rows, summary_lines

    rows: dict[str, list[tuple[str, str, list[str]]]] = {}
    for received in [plain_rows(), *_received_corpus_rows]:
        for route, route_rows in received.items():
            rows.setdefault(route, []).extend(route_rows)
    lines = summary_lines(rows)
    if lines:
        terminalreporter.section("edge real-file corpus")
        for line in lines:
            terminalreporter.write_line(line)
