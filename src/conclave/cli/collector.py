"""``conclave collector schedule add|list|pause|resume|remove``: manage cron schedules over the
HTTP API."""

from __future__ import annotations

import json
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console

from conclave.platform.urls import path_segment
from conclave.settings import CollectorSettings

console = Console()
errors = Console(stderr=True)
collector_app = typer.Typer(help="Talk to the expedition service.", no_args_is_help=True)
schedule_app = typer.Typer(help="Cron schedules that trigger expeditions.", no_args_is_help=True)
collector_app.add_typer(schedule_app, name="schedule")

Server = Annotated[
    str | None,
    typer.Option(help="Expedition service URL (default COLLECTOR_API_BASE or its host and port)."),
]
Token = Annotated[str | None, typer.Option(help="Bearer token, when the service requires one.")]


def _client(server: str | None, token: str | None) -> httpx.Client:
    settings = CollectorSettings()
    base = server or settings.api_base or f"http://{settings.host}:{settings.port}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=base, headers=headers, timeout=30)


def _checked(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            problem = response.json()
            detail = f"{problem.get('code')}: {problem.get('detail')}"
            for error in problem.get("errors") or []:
                detail += f"\n  {error.get('field')}: {error.get('message')}"
        except ValueError:
            detail = response.text[:300]
        errors.print(f"[red]error[/red] HTTP {response.status_code} {detail}")
        raise typer.Exit(1)
    return response.json() if response.content else None


@schedule_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Unique schedule name ([A-Za-z0-9_.-]).")],
    cron: Annotated[str, typer.Argument(help="Five-field cron expression, UTC.")],
    expedition_type: Annotated[str, typer.Argument(help="Expedition type to run.")],
    collection: Annotated[
        list[str] | None, typer.Option("--collection", "-c", help="Target collection(s).")
    ] = None,
    priority: Annotated[str, typer.Option(help="critical, high, medium or low.")] = "medium",
    parameters: Annotated[str, typer.Option(help="Parameters, a JSON object.")] = "{}",
    server: Server = None,
    token: Token = None,
) -> None:
    """Add a schedule."""
    try:
        params = json.loads(parameters)
    except ValueError as exc:
        errors.print(f"[red]error[/red] --parameters is not JSON: {exc}")
        raise typer.Exit(2) from exc
    body = {
        "name": name,
        "cron": cron,
        "expedition_type": expedition_type,
        "target_collections": collection or [],
        "priority": priority,
        "parameters": params,
    }
    with _client(server, token) as client:
        created = _checked(client.post("/schedules", json=body))
    console.print(
        f"schedule [bold]{created['name']}[/bold] next fires at {created['next_fire_at']}"
    )


@schedule_app.command("list")
def list_schedules(server: Server = None, token: Token = None) -> None:
    """List schedules."""
    with _client(server, token) as client:
        body = _checked(client.get("/schedules"))
    # One line per schedule, tab separated: readable, and easy to cut/awk in scripts.
    console.print("name\tcron\ttype\tpriority\tenabled\tnext fire\tlast fired", highlight=False)
    for item in body["schedules"]:
        fields = (
            item["name"],
            item["cron"],
            item["expedition_type"],
            item["priority"],
            "yes" if item["enabled"] else "no",
            item["next_fire_at"],
            item["last_fired_at"] or "-",
        )
        console.print("\t".join(fields), highlight=False, soft_wrap=True)


@schedule_app.command("remove")
def remove(
    name: Annotated[str, typer.Argument(help="Schedule to remove.")],
    server: Server = None,
    token: Token = None,
) -> None:
    """Remove a schedule."""
    with _client(server, token) as client:
        _checked(client.delete(f"/schedules/{path_segment(name)}"))
    console.print(f"schedule [bold]{name}[/bold] removed")


@schedule_app.command("pause")
def pause(
    name: Annotated[str, typer.Argument(help="Schedule to pause (no tick fires).")],
    server: Server = None,
    token: Token = None,
) -> None:
    """Pause a schedule."""
    with _client(server, token) as client:
        _checked(client.patch(f"/schedules/{path_segment(name)}", json={"enabled": False}))
    console.print(f"schedule [bold]{name}[/bold] paused")


@schedule_app.command("resume")
def resume(
    name: Annotated[str, typer.Argument(help="Schedule to resume at its next tick after now.")],
    server: Server = None,
    token: Token = None,
) -> None:
    """Resume a paused schedule."""
    with _client(server, token) as client:
        resumed = _checked(client.patch(f"/schedules/{path_segment(name)}", json={"enabled": True}))
    console.print(f"schedule [bold]{name}[/bold] resumed, next fires at {resumed['next_fire_at']}")
