"""The logs' keys from settings: configured keys, a key generated on first start in embedded mode
(kept 0600, reused), none generated in production, rotation's two signers, published keys."""

from __future__ import annotations

import logging
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.tlog import LogKeyError, LogKeys, TransparencyLog, log_keys, open_log
from conclave.platform.tlog.keys import embedded_key
from conclave.platform.transparency import (
    MalformedInput,
    MalformedKey,
    NoteSigner,
    NoteVerifier,
    UnexpectedOrigin,
    UnverifiedNote,
    VerifierSet,
    generate_key,
    open_checkpoint,
)
from conclave.settings import CommonSettings
from tests.platform.transparency.stored_logs import open_test_log, test_keys

POSTGRES = "postgresql+asyncpg://conclave@db.internal/conclave"


def settings_of(tmp_path: Path, **values: Any) -> CommonSettings:
    values.setdefault("CONCLAVE_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'c.db'}")
    return CommonSettings(CONCLAVE_DATA_DIR=tmp_path, **values)


def test_a_configured_key_signs_the_log_it_is_named_after(tmp_path: Path) -> None:
    calls, _ = generate_key("conclave.example.com/gateway-calls")
    packs, _ = generate_key("conclave.example.com/edge-packs")
    settings = settings_of(
        tmp_path,
        CONCLAVE_DATABASE_URL=POSTGRES,
        CONCLAVE_TLOG_ORIGIN="conclave.example.com",
        CONCLAVE_TLOG_SIGNER_KEYS=f"{calls},\n {packs}",
    )

    keys = log_keys(settings, "gateway-calls")

    assert keys.origin == "conclave.example.com/gateway-calls"
    assert [signer.skey() for signer in keys.signers] == [calls]
    assert keys.vkeys() == [NoteSigner.from_skey(calls).verifier.vkey]
    assert log_keys(settings, "edge-packs").signers[0].skey() == packs
    assert not (tmp_path / "tlog-keys").exists()


def test_production_without_a_key_is_refused(tmp_path: Path) -> None:
    other, _ = generate_key("conclave.localhost/edge-packs")
    settings = settings_of(
        tmp_path, CONCLAVE_DATABASE_URL=POSTGRES, CONCLAVE_TLOG_SIGNER_KEYS=other
    )
    with pytest.raises(LogKeyError, match=r"conclave\.localhost/gateway-calls"):
        log_keys(settings, "gateway-calls")
    assert not (tmp_path / "tlog-keys").exists()


def test_embedded_mode_generates_a_key_once_and_keeps_it_private(tmp_path: Path) -> None:
    settings = settings_of(tmp_path)

    first = log_keys(settings, "gateway-calls")
    again = log_keys(settings, "gateway-calls")
    other = log_keys(settings, "edge-packs")

    path = tmp_path / "tlog-keys" / "gateway-calls.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text() == first.signers[0].skey() + "\n"
    assert again.vkeys() == first.vkeys()
    assert other.vkeys() != first.vkeys()
    assert first.origin == first.signers[0].name == "conclave.localhost/gateway-calls"
    assert sorted(p.name for p in path.parent.iterdir()) == ["edge-packs.key", "gateway-calls.key"]


def test_processes_starting_together_keep_one_generated_key(tmp_path: Path) -> None:
    path = tmp_path / "tlog-keys" / "calls.key"
    found: list[str] = []
    barrier = threading.Barrier(8)

    def start() -> None:
        barrier.wait()
        found.append(embedded_key(path, "conclave.localhost/calls").skey())

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(set(found)) == 1
    assert path.read_text() == found[0] + "\n"
    assert [p.name for p in path.parent.iterdir()] == ["calls.key"]  # no temporary file left


def test_a_key_file_others_may_read_or_of_another_origin_is_refused(tmp_path: Path) -> None:
    settings = settings_of(tmp_path)
    log_keys(settings, "calls")
    path = tmp_path / "tlog-keys" / "calls.key"

    path.chmod(0o640)
    with pytest.raises(LogKeyError, match="0600"):
        log_keys(settings, "calls")
    path.chmod(0o600)

    moved = settings_of(tmp_path, CONCLAVE_TLOG_ORIGIN="conclave.example.com")
    with pytest.raises(LogKeyError, match="CONCLAVE_TLOG_ORIGIN"):
        log_keys(moved, "calls")

    path.write_bytes(b"\xff\xfe not a key")
    with pytest.raises(LogKeyError):
        log_keys(settings, "calls")


def test_a_configured_key_wins_over_a_generated_one(tmp_path: Path) -> None:
    log_keys(settings_of(tmp_path), "calls")
    configured, _ = generate_key("conclave.localhost/calls")
    keys = log_keys(settings_of(tmp_path, CONCLAVE_TLOG_SIGNER_KEYS=configured), "calls")
    assert [signer.skey() for signer in keys.signers] == [configured]


def test_malformed_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(MalformedKey):
        log_keys(settings_of(tmp_path, CONCLAVE_TLOG_SIGNER_KEYS="PRIVATE+KEY+x+0+AAAA"), "calls")
    with pytest.raises(MalformedKey):
        log_keys(settings_of(tmp_path, CONCLAVE_TLOG_RETIRED_VERIFIER_KEYS="nope"), "calls")
    for name in ("", "Calls", "a/b", "../keys", "-x", "a" * 65, "calls\n", "é"):
        with pytest.raises(MalformedInput):
            log_keys(settings_of(tmp_path), name)
    for origin in ("", "has space", "a+b", "tab\there", "é.example", "x" * 191):
        with pytest.raises(ValidationError):
            CommonSettings(CONCLAVE_TLOG_ORIGIN=origin)
    for interval in ("0", "-1", "3601"):
        with pytest.raises(ValidationError):
            CommonSettings(CONCLAVE_TLOG_CHECKPOINT_INTERVAL_SECONDS=interval)


async def test_rotation_signs_with_both_keys_then_publishes_the_old_one_as_retired(
    tmp_path: Path, sqlite_engine: AsyncEngine
) -> None:
    old, old_vkey = generate_key("conclave.localhost/calls")
    new, new_vkey = generate_key("conclave.localhost/calls")
    fast = {"CONCLAVE_TLOG_CHECKPOINT_INTERVAL_SECONDS": 1e-6}

    async def checkpoint_with(entry: bytes, **values: Any) -> str:
        log = await open_log(sqlite_engine, settings_of(tmp_path, **fast, **values), "calls")
        await log.append([entry])
        note = (await log.integrate()).note
        assert note is not None
        return note

    before = await checkpoint_with(b"a", CONCLAVE_TLOG_SIGNER_KEYS=old)
    # The change-over: both keys sign, so a reader knowing either one opens the checkpoint.
    during = await checkpoint_with(b"b", CONCLAVE_TLOG_SIGNER_KEYS=f"{old} {new}")
    for vkey in (old_vkey, new_vkey):
        only = VerifierSet([NoteVerifier.from_vkey(vkey)])
        assert open_checkpoint(during, only).checkpoint.size == 2
    # Then the new key alone; the old one stays published, for what it signed.
    retired = {"CONCLAVE_TLOG_RETIRED_VERIFIER_KEYS": old_vkey}
    after = await checkpoint_with(b"c", CONCLAVE_TLOG_SIGNER_KEYS=new, **retired)
    with pytest.raises(UnverifiedNote):
        open_checkpoint(after, VerifierSet([NoteVerifier.from_vkey(old_vkey)]))
    keys = log_keys(settings_of(tmp_path, CONCLAVE_TLOG_SIGNER_KEYS=new, **retired), "calls")
    assert keys.vkeys() == [new_vkey, old_vkey]
    published = VerifierSet(keys.verifiers)
    assert [open_checkpoint(n, published).checkpoint.size for n in (before, after)] == [1, 3]


async def test_a_log_keeps_the_origin_it_began_with(log_engine: AsyncEngine) -> None:
    await open_test_log(log_engine, name="calls")
    elsewhere = "elsewhere.example/calls"
    with pytest.raises(UnexpectedOrigin):
        await TransparencyLog.open(
            log_engine, "calls", LogKeys(elsewhere, (NoteSigner.generate(elsewhere),))
        )


async def test_a_key_replaced_without_rotation_is_warned_about(
    log_engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    await open_test_log(log_engine, test_keys())
    with caplog.at_level(logging.WARNING, logger="conclave.platform.tlog.log"):
        await open_test_log(log_engine, test_keys())  # another key of the same name
    assert [r.getMessage() for r in caplog.records] == [
        "the latest checkpoint of a transparency log is signed by none of its keys"
    ]
