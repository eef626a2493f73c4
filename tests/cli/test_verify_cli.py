"""`conclave verify receipt|consistency`: offline checks of what a log's endpoints serve, with the
log's public keys only; status 0 when they hold, one line and a non-zero status otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner, Result

from conclave.cli.main import app
from conclave.edge_client.receipts import check_consistency, check_receipt
from conclave.platform.tlog import LogKeys, TransparencyLog
from conclave.platform.tlog.published import PublishedLogs
from conclave.platform.transparency import (
    Checkpoint,
    LeafMismatch,
    NoteSigner,
    RootMismatch,
    sign_checkpoint,
    tree_root,
)
from tests.platform.transparency.trees import tree_of

runner = CliRunner()
ORIGIN = "conclave.localhost/calls"
KEY = NoteSigner(ORIGIN, bytes([3]) * 32)
ENTRIES = [f"call {index}".encode() for index in range(12)]


def verify(*args: str | Path) -> Result:
    return runner.invoke(app, ["verify", *map(str, args)])


@pytest.fixture
async def served(sqlite_engine: AsyncEngine, tmp_path: Path) -> Path:
    """Files as the endpoints serve them: receipts of 12 leaves, the checkpoint of 7 leaves, a
    consistency bundle from 7 to 12, the keys document, and the entries."""
    log = await TransparencyLog.open(
        sqlite_engine, "calls", LogKeys(ORIGIN, (KEY,)), checkpoint_interval=0.001
    )
    logs = PublishedLogs([log])
    await log.append(ENTRIES[:7])
    await log.integrate()
    (tmp_path / "old.checkpoint").write_text(await logs.latest_checkpoint("calls"))
    await log.append(ENTRIES[7:])
    while (await log.state()).integrated_size < 12:
        await log.integrate()
    for index, entry in enumerate(ENTRIES):
        receipt = await logs.receipt("calls", index)
        (tmp_path / f"{index}.receipt").write_text(json.dumps(receipt.to_json()))
        (tmp_path / f"{index}.data").write_bytes(entry)
    bundle = await logs.consistency_bundle("calls", 7, 12)
    (tmp_path / "7-12.bundle").write_text(json.dumps(bundle.to_json()))
    keys = {"origin": ORIGIN, "keys": [{"vkey": KEY.verifier.vkey, "status": "current"}]}
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    return tmp_path


def test_every_served_receipt_verifies_with_its_entry(served: Path) -> None:
    for index in range(12):
        result = verify(
            "receipt",
            served / f"{index}.receipt",
            "--key",
            KEY.verifier.vkey,
            "--data",
            served / f"{index}.data",
        )
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(f"verified: the receipt's leaf is in {ORIGIN} at 12 leaves")


def test_the_keys_document_of_the_endpoint_is_a_key_file(served: Path) -> None:
    result = verify("receipt", served / "3.receipt", "--key", served / "keys.json")
    assert result.exit_code == 0, result.output


def test_a_receipt_for_other_data_another_key_or_a_changed_byte_fails(served: Path) -> None:
    other = verify(
        "receipt", served / "3.receipt", "--key", KEY.verifier.vkey, "--data", served / "4.data"
    )
    assert other.exit_code == 1
    assert other.stderr.count("\n") == 1
    assert other.stderr.startswith("conclave verify: not verified:")

    stranger = NoteSigner(ORIGIN, bytes([4]) * 32).verifier.vkey
    unknown = verify("receipt", served / "3.receipt", "--key", stranger)
    assert unknown.exit_code == 1

    document = (served / "3.receipt").read_bytes()
    for position in range(0, len(document), 7):
        changed = bytearray(document)
        changed[position] ^= 0x02
        (served / "changed.receipt").write_bytes(bytes(changed))
        result = verify("receipt", served / "changed.receipt", "--key", KEY.verifier.vkey)
        assert result.exit_code in (1, 2), position
        assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "key", "status"),
    [
        (None, None, 2),  # no such file
        (b"", None, 2),
        (b"\xff" * 10, None, 2),
        (b"{}", None, 2),
        (b"[" * 100_000, None, 2),
        (b"x" * (3 << 20), None, 2),
        (None, "not a key", 2),
        (None, "a+b+c", 2),
        (None, "keys/missing.json", 2),
    ],
)
def test_unreadable_input_is_status_2_with_one_line(
    served: Path, content: bytes | None, key: str | None, status: int
) -> None:
    path = served / "3.receipt"
    if content is not None:
        path = served / "hostile.receipt"
        path.write_bytes(content)
    elif key is None:
        path = served / "missing.receipt"
    result = verify("receipt", path, "--key", key or KEY.verifier.vkey)
    assert result.exit_code == status, result.output
    assert result.stderr.count("\n") == 1


def test_consistency_from_a_kept_checkpoint_or_receipt(served: Path) -> None:
    for kept in ("old.checkpoint", "0.receipt"):
        result = verify(
            "consistency", served / kept, served / "7-12.bundle", "--key", KEY.verifier.vkey
        )
        # A receipt kept from the 12-leaf checkpoint is not where the bundle starts.
        if kept == "0.receipt":
            assert result.exit_code == 1
            assert "another checkpoint" in result.stderr
        else:
            assert result.exit_code == 0, result.output
            assert result.stdout.startswith(f"verified: {ORIGIN} at 12 leaves")


def test_claims_that_read_fine_but_do_not_hold_are_status_1(served: Path) -> None:
    """A monitor alerting on "not verified" (1) and not on "unreadable" (2) must see these: a
    receipt whose index is past its checkpoint, a proof taken from other sizes, a rollback."""
    receipt = json.loads((served / "3.receipt").read_text())
    beyond = {**receipt, "index": 12}
    shorter = {**receipt, "inclusion_proof": receipt["inclusion_proof"][1:]}
    for name, document in (("beyond", beyond), ("shorter", shorter)):
        (served / f"{name}.receipt").write_text(json.dumps(document))
        result = verify("receipt", served / f"{name}.receipt", "--key", KEY.verifier.vkey)
        assert result.exit_code == 1, (name, result.output)
        assert result.stderr.startswith("conclave verify: not verified:")
    bundle = json.loads((served / "7-12.bundle").read_text())
    rollback = {**bundle, "old": bundle["new"], "new": bundle["old"]}
    (served / "rollback.bundle").write_text(json.dumps(rollback))
    kept = served / "12.checkpoint"
    kept.write_text(bundle["new"])
    result = verify("consistency", kept, served / "rollback.bundle", "--key", KEY.verifier.vkey)
    assert result.exit_code == 1, result.output
    assert "cannot extend" in result.stderr


def test_a_kept_checkpoint_that_is_not_text_is_unreadable(served: Path) -> None:
    note = (served / "old.checkpoint").read_bytes()
    for name, content in (("bom", b"\xef\xbb\xbf" + note), ("latin1", note + b"\xe9")):
        (served / name).write_bytes(content)
        result = verify(
            "consistency", served / name, served / "7-12.bundle", "--key", KEY.verifier.vkey
        )
        assert result.exit_code == 2, (name, result.output)


def test_a_key_file_whose_name_holds_a_plus_is_read(served: Path) -> None:
    named = served / "calls+key.json"
    named.write_bytes((served / "keys.json").read_bytes())
    result = verify("receipt", served / "3.receipt", "--key", named)
    assert result.exit_code == 0, result.output


def test_a_forked_log_is_caught(served: Path) -> None:
    # The same key signs another tree of 7 leaves: the bundle's proof does not start from it.
    forked = sign_checkpoint(Checkpoint(ORIGIN, 7, tree_root(tree_of(7, b"fork"), 7)), KEY)
    (served / "forked.checkpoint").write_bytes(forked)
    result = verify(
        "consistency",
        served / "forked.checkpoint",
        served / "7-12.bundle",
        "--key",
        KEY.verifier.vkey,
    )
    assert result.exit_code == 1
    assert "forked" in result.stderr
    with pytest.raises(RootMismatch):
        check_consistency(forked, (served / "7-12.bundle").read_bytes(), KEY.verifier.vkey)


def test_the_sdk_function_is_the_same_check(served: Path) -> None:
    receipt = (served / "5.receipt").read_bytes()
    opened = check_receipt(receipt, [KEY.verifier.vkey], ENTRIES[5])
    assert opened.checkpoint.size == 12
    with pytest.raises(LeafMismatch):
        check_receipt(receipt, KEY.verifier.vkey, ENTRIES[6])


def test_the_installed_command_needs_no_server(served: Path) -> None:
    # A real process, with no store or bus configured and nothing listening: the check is local.
    env = {key: value for key, value in os.environ.items() if not key.startswith("CONCLAVE_")}
    env["CONCLAVE_DATABASE_URL"] = "postgresql+asyncpg://nobody@127.0.0.1:1/none"
    command = [sys.executable, "-m", "conclave.cli.main", "verify", "receipt"]
    ok = subprocess.run(
        [*command, str(served / "2.receipt"), "--key", KEY.verifier.vkey],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run(
        [
            *command,
            str(served / "2.receipt"),
            "--key",
            KEY.verifier.vkey,
            "--data",
            str(served / "1.data"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1
