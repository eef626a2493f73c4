"""``conclave outbox list|replay|discard``: deal with outbox events the bus refused (quarantined).

They work on the configured store (SQLite in embedded mode or PostgreSQL), like ``migrate``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.clock import rfc3339
from conclave.platform.db.engine import create_engine
from conclave.platform.outbox_store import QuarantinedEvent, discard, list_quarantined, replay
from conclave.settings import CommonSettings

console = Console()
errors = Console(stderr=True)
outbox_app = typer.Typer(
    help="Outbox events the bus refused: list, replay or discard them.", no_args_is_help=True
)

EventIds = Annotated[
    list[str] | None,
    typer.Argument(help="Event ids (see `conclave outbox list`).", show_default=False),
]
All = Annotated[bool, typer.Option("--all", help="Every quarantined event.")]

T = TypeVar("T")


def _on_store(work: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    settings = CommonSettings()

    async def run() -> T:
        engine = create_engine(
            settings.resolved_database_url(), pool_size=1, schema=settings.database_schema
        )
        try:
            return await work(engine)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def _chosen(event_ids: list[str] | None, every: bool) -> list[str] | None:
    if every == bool(event_ids):
        errors.print("[red]error[/red] give event ids, or --all (not both)")
        raise typer.Exit(2)
    return None if every else event_ids


def _as_json(event: QuarantinedEvent) -> dict[str, object]:
    document = asdict(event)  # the fields in their order, times as RFC 3339 text
    document["created_at"] = rfc3339(event.created_at)
    document["quarantined_at"] = rfc3339(event.quarantined_at)
    return document


@outbox_app.command("list")
def list_command(
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document, payloads included.")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, help="At most this many events.")] = 1000,
) -> None:
    """List quarantined events, oldest quarantine first."""
    events = _on_store(lambda engine: list_quarantined(engine, limit))
    if as_json:
        # ensure_ascii: a payload may hold text a terminal or pipe cannot encode (why it is here).
        typer.echo(json.dumps({"events": [_as_json(event) for event in events]}, ensure_ascii=True))
        return
    if not events:
        console.print("no quarantined events")
        return
    # One line per event, tab separated: readable, and easy to cut/awk in scripts.
    console.print("event id\tchannel\tattempts\tcreated\tquarantined\terror", highlight=False)
    for event in events:
        error = (event.last_error or "-").splitlines()[0][:200]
        fields = (
            event.event_id,
            event.channel,
            str(event.attempts),
            rfc3339(event.created_at),
            rfc3339(event.quarantined_at),
            error,
        )
        line = "\t".join(fields).encode("utf-8", "backslashreplace").decode()
        console.print(line, highlight=False, soft_wrap=True, markup=False)


@outbox_app.command("replay")
def replay_command(
    event_ids: EventIds = None,
    every: All = False,
    escape_text: Annotated[
        bool,
        typer.Option(
            "--escape",
            help="First rewrite text the bus cannot carry (lone surrogates, NUL) as \\uXXXX "
            "escapes in the payload.",
        ),
    ] = False,
) -> None:
    """Put quarantined events back in the relay's due set (published at its next pass; an event
    still refused goes back to quarantine)."""
    chosen = _chosen(event_ids, every)
    done = _on_store(lambda engine: replay(engine, chosen, escape=escape_text))
    _report("replayed", chosen, done)


@outbox_app.command("discard")
def discard_command(event_ids: EventIds = None, every: All = False) -> None:
    """Delete quarantined events: they are never published (keep `list --json` first if needed)."""
    chosen = _chosen(event_ids, every)
    done = _on_store(lambda engine: discard(engine, chosen))
    _report("discarded", chosen, done)


def _report(verb: str, chosen: list[str] | None, done: list[str]) -> None:
    console.print(f"{verb} {len(done)} event{'s' if len(done) != 1 else ''}")
    found = set(done)
    missing = [event_id for event_id in chosen or [] if event_id not in found]
    if missing:
        errors.print(f"[red]error[/red] not quarantined: {escape(', '.join(missing))}")
        raise typer.Exit(1)
