"""``conclave log-key LOG``: a new signer key for one of the deployment's transparency logs.

Outside embedded mode no key is generated at start (replicas that each made one would sign one log
with keys no reader knows): an operator makes the key once with this command, puts the signer key
in ``CONCLAVE_TLOG_SIGNER_KEYS`` of every replica, and publishes the verifier key.
"""

from __future__ import annotations

from typing import Annotated

import typer

from conclave.platform.tlog import log_origin
from conclave.platform.transparency import generate_key
from conclave.platform.transparency.errors import MalformedInput
from conclave.settings import CommonSettings


def log_key_command(
    log: Annotated[str, typer.Argument(help="The log's name: 'calls' (gateway), 'packs' (edge).")],
) -> None:
    """Print a new signer key (secret: for CONCLAVE_TLOG_SIGNER_KEYS) on stdout and its verifier
    key (public: what readers verify with) on stderr, named after the log's origin
    (CONCLAVE_TLOG_ORIGIN/LOG)."""
    try:
        origin = log_origin(CommonSettings(), log)
    except MalformedInput as error:
        typer.echo(f"conclave log-key: {error}", err=True)
        raise typer.Exit(2) from None
    signer, verifier = generate_key(origin)
    typer.echo(signer)
    typer.echo(f"verifier key: {verifier}", err=True)
