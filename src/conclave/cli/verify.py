"""``conclave verify receipt|consistency``: check a transparency log's receipts and consistency
bundles offline, with the log's verifier keys only (no server, no settings, no store).

Exit status 0 when the check holds; otherwise one line on stderr saying why, and status 1 when a
claim does not hold (a proof, signature or entry that does not verify) or 2 when an input cannot
be read (a missing file, a document or key of the wrong shape).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from conclave.edge_client.receipts import (
    check_consistency,
    check_receipt,
    checkpoint_summary,
    verifier_keys,
)
from conclave.platform.transparency.errors import (
    MalformedInput,
    TransparencyError,
    VerificationFailed,
)
from conclave.platform.transparency.note import VerifierSet
from conclave.platform.transparency.receipt import MAX_DOCUMENT_BYTES

verify_app = typer.Typer(
    help="Check transparency log receipts and consistency offline, with the log's public keys.",
    no_args_is_help=True,
)

FAILED = 1
UNREADABLE = 2

Keys = Annotated[
    list[str],
    typer.Option(
        "--key",
        help="A verifier key '<origin>+<id>+<key>', or a file of them (one per line, or the JSON "
        "of GET /logs/{name}/keys). Repeat for several (e.g. a rotated key).",
        show_default=False,
    ),
]


def _fail(status: int, reason: str) -> typer.Exit:
    typer.echo(f"conclave verify: {reason}", err=True)
    return typer.Exit(status)


def _read(path: Path, what: str, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    try:
        with path.open("rb") as file:
            data = file.read(limit + 1)
    except OSError as error:
        raise _fail(UNREADABLE, f"cannot read the {what} {path}: {error.strerror}") from None
    if len(data) > limit:
        raise _fail(UNREADABLE, f"the {what} {path} is larger than {limit} bytes")
    return data


def _keys(values: list[str]) -> VerifierSet:
    """The keys given: a file's when the value names one (whatever its name holds), else the
    value as key text; a value that is neither is named as a missing file unless it looks like a
    key (keys hold '+', file names seldom do)."""
    texts: list[str] = []
    for value in values:
        path = Path(value)
        if path.is_file():
            texts.append(_read(path, "key file").decode("utf-8", "replace"))
            continue
        if "+" not in value:
            raise _fail(UNREADABLE, f"--key {value[:200]!r} is no key and no file")
        texts.append(value)
    return verifier_keys(texts)


def _checked(error: TransparencyError) -> typer.Exit:
    reason = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, VerificationFailed):
        return _fail(FAILED, f"not verified: {reason}")
    if isinstance(error, MalformedInput):
        return _fail(UNREADABLE, f"malformed input: {reason}")
    return _fail(FAILED, reason)


@verify_app.command("receipt")
def receipt(
    file: Annotated[Path, typer.Argument(help="The receipt (JSON), as served.")],
    key: Keys,
    data: Annotated[
        Path | None,
        typer.Option("--data", help="The entry's bytes: also check it is what the receipt proves."),
    ] = None,
) -> None:
    """Check that a receipt's leaf is in the log under its signed checkpoint."""
    document = _read(file, "receipt")
    entry = _read(data, "data file", 1 << 24) if data is not None else None
    try:
        opened = check_receipt(document, _keys(key), entry)
    except TransparencyError as error:
        raise _checked(error) from None
    typer.echo(f"verified: the receipt's leaf is in {checkpoint_summary(opened.checkpoint)}")


@verify_app.command("consistency")
def consistency(
    old: Annotated[Path, typer.Argument(help="The checkpoint (or receipt) kept from before.")],
    new: Annotated[
        Path,
        typer.Argument(help="The consistency bundle from it (proof/consistency?checkpoints=true)."),
    ],
    key: Keys,
) -> None:
    """Check that the log's newer checkpoint extends the one kept (the log did not fork)."""
    kept = _read(old, "old checkpoint")
    bundle = _read(new, "consistency bundle")
    try:
        first, second = check_consistency(kept, bundle, _keys(key))
    except TransparencyError as error:
        raise _checked(error) from None
    typer.echo(
        f"verified: {checkpoint_summary(second.checkpoint)} extends {first.checkpoint.size} leaves"
    )
