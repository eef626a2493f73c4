"""``conclave edge``: queue media on a device and send it to the edge intake service."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import SecretStr
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from conclave.edge_client import (
    EdgeClient,
    Envelope,
    InvalidEnvelope,
    Outbox,
    OutboxCorrupt,
    SyncDaemon,
    SyncReport,
    default_outbox_path,
)
from conclave.edge_client.envelope import parse_metadata
from conclave.edge_client.errors import ReceiptUnavailable
from conclave.edge_client.kept_receipts import ReceiptCheck
from conclave.edge_client.outbox_records import StoredReceipt
from conclave.edge_client.pack_entries import entry_document
from conclave.platform.media_types import media_type_names
from conclave.settings import EdgeClientSettings

edge_app = typer.Typer(
    help="Edge client: queue media offline and send it to the edge intake service.",
    no_args_is_help=True,
)
out = Console()
err = Console(stderr=True)
# Below this many due items a progress bar is more noise than help.
PROGRESS_MIN_ITEMS = 10

ServerOption = Annotated[
    str | None, typer.Option("--server", help="Edge service URL; default from CORE_EDGE_API_URL.")
]
TokenOption = Annotated[
    str | None, typer.Option("--token", help="Bearer token; default from CORE_EDGE_API_TOKEN.")
]
OutboxOption = Annotated[
    Path | None, typer.Option("--outbox", help="Outbox file; default from CONCLAVE_EDGE_OUTBOX.")
]
ConcurrencyOption = Annotated[
    int, typer.Option("--concurrency", min=1, max=32, help="Uploads in flight at once.")
]


def _type_help() -> str:
    *most, last = media_type_names()
    return f"{', '.join(most)} or {last}." if most else f"{last}."


def _fail(message: str, code: int) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@contextlib.contextmanager
def _open_outbox(outbox: Path | None) -> Iterator[Outbox]:
    path = outbox or EdgeClientSettings().outbox or default_outbox_path()
    try:
        opened = Outbox(path)
    except OutboxCorrupt as exc:
        raise _fail(str(exc), 1) from exc
    with opened:
        yield opened


def _client(server: str | None, token: str | None) -> EdgeClient:
    settings = EdgeClientSettings()
    return EdgeClient(
        server or settings.api_url,
        SecretStr(token) if token else settings.api_token,
        settings.timeout_seconds,
        signing_secret=settings.signing_secret,
        device_id=settings.device_id,
    )


@edge_app.command()
def enqueue(
    source_type: Annotated[str, typer.Argument(metavar="TYPE", help=_type_help())],
    paths: Annotated[list[Path], typer.Argument(metavar="PATH...", help="Files to send.")],
    metadata: Annotated[
        str | None, typer.Option("--metadata", help="JSON object sent with each file.")
    ] = None,
    correlation_id: Annotated[str | None, typer.Option(help="Correlation id.")] = None,
    sampling_policy_ref: Annotated[str | None, typer.Option(help="Sampling policy.")] = None,
    outbox: OutboxOption = None,
) -> None:
    """Queue files for upload (all are checked first; on any error nothing is queued)."""
    try:
        fields = parse_metadata(metadata)
        envelopes = [
            Envelope.for_file(source_type.lower(), path, fields, correlation_id) for path in paths
        ]
    except InvalidEnvelope as exc:
        raise _fail(str(exc), 2) from exc
    with _open_outbox(outbox) as box:
        items = box.enqueue_many(envelopes, sampling_policy_ref=sampling_policy_ref)
    for item in items:
        out.print(f"queued #{item.id} {item.envelope.source_type} {item.envelope.path}")


@edge_app.command()
def sync(
    server: ServerOption = None,
    token: TokenOption = None,
    outbox: OutboxOption = None,
    concurrency: ConcurrencyOption = 2,
) -> None:
    """Send every due item now (exit code 1 if any failed or the server was unreachable)."""
    with _open_outbox(outbox) as box:
        report = asyncio.run(_sync(box, _client(server, token), concurrency))
    _print_report(report)
    if report.stopped or report.failed or report.retrying:
        raise typer.Exit(1)


async def _sync(box: Outbox, client: EdgeClient, concurrency: int) -> SyncReport:
    total = box.due_count()
    async with client:
        if total < PROGRESS_MIN_ITEMS:
            return await box.sync(client, concurrency=concurrency)
        columns = (
            TextColumn("sending"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=err, transient=True) as progress:
            task = progress.add_task("sync", total=total)
            return await box.sync(
                client,
                concurrency=concurrency,
                on_item=lambda _item, _outcome: progress.advance(task),
            )


def _print_report(report: SyncReport) -> None:
    already = f" ({report.duplicates} already on the server)" if report.duplicates else ""
    out.print(
        f"sent {len(report.sent)}{already}, retrying later {len(report.retrying)}, "
        f"failed {len(report.failed)}"
    )
    if report.stopped:
        err.print(f"stopped early, server unavailable: {report.stopped}", soft_wrap=True)


@edge_app.command()
def status(
    outbox: OutboxOption = None,
    errors: Annotated[int, typer.Option("--errors", min=0, help="Last errors to list.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Items per state and the last errors."""
    with _open_outbox(outbox) as box:
        counts = box.counts()
        failed = box.last_errors(errors)
        path = box.path
    if as_json:
        last = [
            {"id": i.id, "attempts": i.attempts, "auto_retry": i.auto_retry, "error": i.last_error}
            for i in failed
        ]
        out.print_json(json.dumps({"outbox": str(path), "counts": counts, "last_errors": last}))
        return
    table = Table("state", "items", title=f"outbox {path}", title_justify="left")
    table.add_row("PENDING", str(counts["PENDING"]))
    table.add_row("  of which sending now", str(counts["sending"]))
    table.add_row("SENT", str(counts["SENT"]))
    table.add_row("FAILED", str(counts["FAILED"]))
    table.add_row("  of which retrying by itself", str(counts["retrying"]))
    out.print(table)
    if failed:
        errors_table = Table("id", "type", "attempts", "next", "error", title="last errors")
        for item in failed:
            when = _when(item.next_attempt_at) if item.auto_retry else "after `retry`"
            row = (str(item.id), item.envelope.source_type, str(item.attempts), when)
            errors_table.add_row(*row, item.last_error or "")
        out.print(errors_table)


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@edge_app.command()
def retry(
    ids: Annotated[list[int] | None, typer.Argument(help="Item ids to retry.")] = None,
    all_items: Annotated[bool, typer.Option("--all", help="Retry every FAILED item.")] = False,
    outbox: OutboxOption = None,
) -> None:
    """Put FAILED items back to PENDING (sent by the next sync)."""
    if bool(ids) == all_items:
        raise _fail("give item ids or --all (not both).", 2)
    with _open_outbox(outbox) as box:
        moved = box.retry("all" if all_items else ids or [])
    out.print(f"{moved} item(s) back to PENDING")


@edge_app.command()
def cleanup(outbox: OutboxOption = None) -> None:
    """Remove SENT items from the outbox."""
    with _open_outbox(outbox) as box:
        removed = box.cleanup()
    out.print(f"removed {removed} SENT item(s)")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*\Z")


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``15m`` or ``1h``."""
    match = _DURATION.match(text)
    if not match or float(match.group(1)) <= 0:
        raise typer.BadParameter("use a positive duration such as 900, 30s, 15m or 1h.")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


@edge_app.command()
def daemon(
    every: Annotated[
        str | None,
        typer.Option(
            help="Period, e.g. 900, 30s, 15m, 1h; default from CONCLAVE_EDGE_SYNC_SECONDS."
        ),
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
    outbox: OutboxOption = None,
    concurrency: ConcurrencyOption = 2,
) -> None:
    """Sync every period (15 min by default) when the server's health check passes."""
    period = parse_duration(every) if every else EdgeClientSettings().sync_every_seconds
    with _open_outbox(outbox) as box:
        client = _client(server, token)
        out.print(f"syncing {box.path} to {client.base_url} every {period:g} s")

        def report(result: SyncReport | None) -> None:
            if result is None:
                err.print("server unavailable (health check failed); next try next period")
            elif result.attempted:
                _print_report(result)

        async def run() -> None:
            async with client:
                await SyncDaemon(box, client, period, on_run=report, concurrency=concurrency).run()

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run())


@edge_app.command()
def receipts(
    fetch: Annotated[
        bool, typer.Option("--fetch", help="Ask the server for the receipts not kept yet.")
    ] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Check every kept receipt with the log's keys.")
    ] = False,
    keys: Annotated[
        list[str] | None,
        typer.Option(
            "--key",
            help="The log's verifier key, or a file of them (GET /logs/packs/keys, or one per "
            "line); repeat for several. Without one, --check asks the server for its keys.",
        ),
    ] = None,
    wait: Annotated[
        float, typer.Option("--wait", min=0, max=60, help="Seconds to keep asking per receipt.")
    ] = 5.0,
    server: ServerOption = None,
    token: TokenOption = None,
    outbox: OutboxOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="The receipts themselves, as JSON.")
    ] = False,
) -> None:
    """The transparency receipts of what this device sent (exit 1 if a check failed)."""
    with _open_outbox(outbox) as box:
        try:
            given = _receipt_keys(keys) if keys else None
            if fetch:
                asyncio.run(_fetch_receipts(box, _client(server, token), wait, given))
            checks: dict[tuple[int, str], ReceiptCheck] = {}
            if check:
                trusted = given or asyncio.run(_server_keys(server, token))
                found_checks = box.check_receipts(trusted)
                checks = {(found.item_id, found.evidence_id): found for found in found_checks}
        except (ValueError, ReceiptUnavailable, OSError) as exc:  # MalformedInput, undecodable
            raise _fail(f"no usable verifier key: {exc}", 2) from exc
        kept = box.receipts()
    # A row per kept receipt, and one per upload the check found without a receipt of its own.
    rows: list[tuple[int, StoredReceipt | None, ReceiptCheck | None]] = [
        (found.item_id, found, checks.pop((found.item_id, found.evidence_id), None))
        for found in kept
    ]
    rows += [(unkept.item_id, None, unkept) for unkept in checks.values()]
    rows.sort(key=lambda row: row[0])
    if as_json:
        listed = [_listed(found, checked) for _, found, checked in rows]
        out.print_json(json.dumps({"receipts": listed}))
    else:
        table = Table("item", "evidence id", "leaf hash", "receipt", "check")
        for item_id, found, checked in rows:
            # The detail may quote what a server sent: never read as markup.
            verdict = escape(f"{checked.status} {checked.detail}".strip()) if checked else ""
            state = "no link"
            if found is not None:
                state = "not fetched"
                if found.receipt:
                    state = "kept, with entry" if found.entry is not None else "kept, entry missing"
            evidence_id = found.evidence_id if found else checked.evidence_id if checked else ""
            leaf = found.log_leaf_hash[:16] if found else ""
            table.add_row(str(item_id), escape(evidence_id), leaf, state, verdict)
        out.print(table)
    if any(checked and checked.status == "invalid" for _, _, checked in rows):
        raise typer.Exit(1)


def _listed(found: StoredReceipt | None, checked: ReceiptCheck | None) -> dict[str, Any]:
    """One row of ``receipts --json``: a kept receipt (with its check), or an upload the check
    found without a receipt of its own (``log_leaf_hash`` null)."""
    if found is None:
        assert checked is not None
        listed: dict[str, Any] = {
            "item_id": checked.item_id,
            "evidence_id": checked.evidence_id,
            "log_leaf_hash": None,
            "receipt": None,
            "entry": None,
        }
    else:
        listed = {
            "item_id": found.item_id,
            "evidence_id": found.evidence_id,
            "log_leaf_hash": found.log_leaf_hash,
            "receipt": _as_json(found.receipt),
            "entry": None if found.entry is None else entry_document(found.entry),
        }
    if checked is not None:
        listed["check"] = checked.status
    return listed


async def _fetch_receipts(
    box: Outbox, client: EdgeClient, wait: float, keys: list[str] | None
) -> None:
    async with client:
        kept = await box.fetch_receipts(client, wait_seconds=wait, keys=keys)
    missing = len(box.receipts(missing_only=True))
    err.print(f"fetched {kept} receipt(s); {missing} not signed or not reachable yet")


async def _server_keys(server: str | None, token: str | None) -> str:
    async with _client(server, token) as client:
        document = await client.log_keys("packs")
    err.print("checking with the keys the server publishes (pass --key to trust your own copy)")
    return document


def _receipt_keys(values: list[str]) -> list[str]:
    """Key texts, or the contents of the files named (a key text has no path separator)."""
    return [Path(value).read_text() if Path(value).is_file() else value for value in values]


@edge_app.command()
def device(outbox: OutboxOption = None) -> None:
    """Show this device's persistent identity (stored in the outbox)."""
    with _open_outbox(outbox) as box:
        identity = box.device
    out.print(f"device_id    {identity.device_id}")
    out.print(f"fingerprint  {identity.fingerprint}")
    out.print(f"created      {identity.created_utc}")
    if not identity.on_original_machine:
        err.print(
            "note: this identity was created on another machine (the outbox was copied); "
            "uploads from here still carry its device id."
        )


if __name__ == "__main__":
    # `python -m conclave.cli.edge` skips importing every service, which `conclave` does.
    edge_app()


def _as_json(kept: str | None) -> Any:
    """A kept receipt as JSON, or its text where it is none (an outbox edited by hand)."""
    if kept is None:
        return None
    try:
        return json.loads(kept)
    except (ValueError, RecursionError):
        return kept
