"""``conclave serve`` (one service, production) and ``conclave up`` (all four, embedded)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import signal
from collections.abc import Iterator
from typing import Annotated

import typer
import uvicorn
from rich.console import Console
from rich.table import Table

from conclave.cli.local_links import follow_ports
from conclave.cli.services import SERVICES, ServiceName, load_settings
from conclave.platform.auth import parse_token_table
from conclave.platform.logs import configure_logging
from conclave.platform.request_origin import RequestSources, loopback_only_warning
from conclave.platform.runtime import Platform
from conclave.platform.serving import server_config
from conclave.platform.tlog import LogKeyError, log_keys
from conclave.platform.tlog.keys import is_embedded
from conclave.settings import CollectorSettings, CommonSettings, GatewaySettings

console = Console(stderr=True)
log = logging.getLogger("conclave.cli")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_auth(settings: CommonSettings, *, allow_off_on_loopback: bool, host: str) -> None:
    try:
        parse_token_table(settings.api_tokens.get_secret_value())
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    if settings.auth_active() or settings.auth == "disabled":
        return
    if allow_off_on_loopback and _is_loopback(host):
        return
    console.print(
        "[red]error:[/red] authentication is not configured. Set CONCLAVE_API_TOKENS "
        "('token=user_id,...'), CONCLAVE_JWT_SECRET or CONCLAVE_JWT_PUBLIC_KEY; or set "
        "CONCLAVE_AUTH=disabled to run without authentication on purpose."
    )
    raise typer.Exit(2)


def _check_log_keys(settings: CommonSettings) -> None:
    """Refuse to start a service whose transparency logs have no signer key (outside embedded
    mode, where one is generated), with what to do, rather than a traceback from its start-up."""
    if is_embedded(settings):
        return
    for name, switch in settings.transparency_logs().items():
        try:
            log_keys(settings, name)
        except LogKeyError as exc:
            console.print(
                f"[red]error:[/red] {exc}. Make one with `conclave log-key {name}` and set it in "
                "CONCLAVE_TLOG_SIGNER_KEYS on every replica of the service, or set "
                f"{switch}=false to run without the transparency log {name!r}."
            )
            raise typer.Exit(2) from exc


def _warn_if_loopback_only(settings: CommonSettings, bind: str) -> None:
    warning = loopback_only_warning(RequestSources.from_settings(settings), bind)
    if warning is not None:
        log.warning(warning)


def tune_garbage_collector() -> None:
    """Keep the collector's full passes off the request path.

    A service allocates many short-lived objects per request; with CPython's default thresholds
    the cyclic collector runs every 700 allocations and now and then walks every object the
    process holds, most of which (imported modules, the app) live for ever. Freezing what exists
    after start-up takes those out of every later pass, and a higher first threshold makes the
    young-generation passes rarer. Memory stays bounded: reference counting frees almost all
    request objects at once; only cycles wait a little longer.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def serve(
    service: Annotated[ServiceName, typer.Argument(help="Which service to run.")],
    host: Annotated[
        str | None, typer.Option(help="Listen address (default from settings).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default from settings).")] = None,
) -> None:
    """Run one service (production mode: one process per service, any number of replicas)."""
    settings = load_settings(service)
    bind = host or settings.host
    _check_auth(settings, allow_off_on_loopback=False, host=bind)
    _check_log_keys(settings)
    configure_logging(settings.log_level, settings.log_format)
    _warn_if_loopback_only(settings, bind)
    app = SERVICES[service].create_app(settings)
    tune_garbage_collector()
    config = server_config(app, settings, host=bind, port=port or settings.port, proxy_headers=True)
    server = uvicorn.Server(config)
    server.run()
    if not server.started:  # the port was taken, the app failed to start: as uvicorn.run does
        raise typer.Exit(3)


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to ``conclave up`` (four servers, one loop)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def up(
    host: Annotated[str, typer.Option(help="Listen address for all four services.")] = "127.0.0.1",
) -> None:
    """Run all four services in this process, embedded: SQLite file, in-process bus."""
    common = GatewaySettings()
    _check_auth(common, allow_off_on_loopback=True, host=host)
    configure_logging(common.log_level, common.log_format)
    _warn_if_loopback_only(common, host)
    asyncio.run(_run_all(host, common))


async def _run_all(host: str, common: GatewaySettings) -> None:
    async with Platform.open(common, max_batch=common.max_batch) as platform:
        servers: list[uvicorn.Server] = []
        table = Table(title="Conclave is up", show_header=True)
        for column in ("service", "address", "what"):
            table.add_column(column)
        inbox = None
        every = follow_ports({name: load_settings(name) for name in SERVICES}, host)
        for name, spec in SERVICES.items():
            settings = every[name]
            if isinstance(settings, CollectorSettings):
                inbox = settings.resolved_file_inbox()
            app = (
                spec.create_app(settings, platform=platform)
                if spec.uses_platform
                else spec.create_app(settings)
            )
            config = server_config(app, settings, host=host, port=settings.port, lifespan="on")
            servers.append(_EmbeddedServer(config))
            table.add_row(name.value, f"http://{host}:{settings.port}", spec.description)
        tune_garbage_collector()
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, _stop_all, servers, stopping)
        running = [asyncio.create_task(_serve(server)) for server in servers]
        failed = await _failed_to_start(list(SERVICES), servers, running, stopping)
        if failed or stopping.is_set():
            _stop_all(servers, stopping)
            await asyncio.gather(*running, return_exceptions=True)
            if not failed:  # stopped (Ctrl-C) while starting: nothing to report
                return
            console.print(f"[red]Conclave did not start[/red]: {', '.join(failed)} (see the log)")
            raise typer.Exit(3)
        console.print(table)
        console.print(f"store: {_describe_store(common)}   bus: {common.resolved_bus_url()}")
        if inbox is not None:
            console.print(f"file source inbox: {inbox} (the only folder it reads by default)")
        console.print(
            "auth: [yellow]off[/yellow] (listening on loopback only)"
            if not common.auth_active()
            else "auth: on (bearer tokens / JWT)"
        )
        results = await asyncio.gather(*running, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result


async def _serve(server: uvicorn.Server) -> None:
    # uvicorn exits the process when its app fails to start; here three other services share
    # the process, and `up` reports the failure and stops them instead.
    with contextlib.suppress(SystemExit):
        await server.serve()


async def _failed_to_start(
    names: list[ServiceName],
    servers: list[uvicorn.Server],
    running: list[asyncio.Task[None]],
    stopping: asyncio.Event,
) -> list[str]:
    """Wait until every server has started (its lifespan ran, its port is bound), one gave up,
    or a stop was asked for: the services that gave up, so ``up`` never says it is up when one
    is not."""

    def gave_up() -> list[str]:
        return [
            name.value
            for name, server, task in zip(names, servers, running, strict=True)
            if task.done() and not server.started
        ]

    while not all(server.started for server in servers):
        if stopping.is_set() or gave_up():
            break
        await asyncio.sleep(0.05)
    return gave_up()


def _stop_all(servers: list[uvicorn.Server], stopping: asyncio.Event) -> None:
    stopping.set()
    for server in servers:
        server.should_exit = True


def _describe_store(settings: CommonSettings) -> str:
    url = settings.resolved_database_url()
    return url.split("@")[-1] if "@" in url else url
