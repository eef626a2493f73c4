"""The ``conclave`` command."""

from __future__ import annotations

import typer

from conclave.cli.collector import collector_app
from conclave.cli.edge import edge_app
from conclave.cli.log_keys import log_key_command
from conclave.cli.migrate import migrate_command
from conclave.cli.outbox import outbox_app
from conclave.cli.run import serve, up
from conclave.cli.verify import verify_app
from conclave.cli.worker import worker_app

app = typer.Typer(
    name="conclave",
    help="Conclave: governed tool execution and evidence intake.",
    no_args_is_help=True,
    add_completion=False,
)
app.command("up")(up)
app.command("serve")(serve)
app.command("migrate")(migrate_command)
app.command("log-key")(log_key_command)
app.add_typer(worker_app, name="worker")
app.add_typer(collector_app, name="collector")
app.add_typer(edge_app, name="edge")
app.add_typer(outbox_app, name="outbox")
app.add_typer(verify_app, name="verify")


def main() -> None:
    """Entry point of the ``conclave`` script."""
    app()


if __name__ == "__main__":
    main()
