"""``conclave log-key`` makes a log's signer key, and a production gateway or edge without one
refuses to start, saying what to set (rather than a traceback from its start-up)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from conclave.cli.main import app
from conclave.platform.tlog import log_keys
from conclave.platform.transparency import NoteSigner, NoteVerifier
from conclave.settings import EdgeSettings, GatewaySettings
from tests.conftest import POSTGRES_URL

runner = CliRunner()


def test_log_key_prints_a_signer_key_named_after_the_logs_origin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONCLAVE_TLOG_ORIGIN", "conclave.example.com")
    result = runner.invoke(app, ["log-key", "calls"])
    assert result.exit_code == 0, result.output
    signer = NoteSigner.from_skey(result.stdout.strip())
    assert signer.name == "conclave.example.com/calls"
    verifier = NoteVerifier.from_vkey(result.stderr.strip().removeprefix("verifier key: "))
    assert verifier.vkey == signer.verifier.vkey
    # The key is what a production gateway then signs its calls log with.
    monkeypatch.setenv("CONCLAVE_TLOG_SIGNER_KEYS", signer.skey())
    settings = GatewaySettings(_env_file=None, database_url=POSTGRES_URL)  # type: ignore[call-arg]
    keys = log_keys(settings, "calls")
    assert keys.origin == "conclave.example.com/calls"
    assert [key.skey() for key in keys.signers] == [signer.skey()]


def test_log_key_refuses_a_name_no_log_can_have() -> None:
    result = runner.invoke(app, ["log-key", "Bad Name"])
    assert result.exit_code == 2
    assert "log name" in result.stderr


def test_a_production_gateway_without_its_calls_log_key_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONCLAVE_AUTH", "disabled")
    monkeypatch.setenv("CONCLAVE_DATABASE_URL", POSTGRES_URL)
    monkeypatch.setenv("GATEWAY_CALL_LOG", "true")
    monkeypatch.delenv("CONCLAVE_TLOG_SIGNER_KEYS", raising=False)
    result = runner.invoke(app, ["serve", "gateway"])
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert "conclave.localhost/calls" in output
    assert "conclave log-key calls" in output and "GATEWAY_CALL_LOG=false" in output


def test_a_production_edge_without_its_packs_log_key_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONCLAVE_AUTH", "disabled")
    monkeypatch.setenv("CONCLAVE_DATABASE_URL", POSTGRES_URL)
    monkeypatch.delenv("CONCLAVE_TLOG_SIGNER_KEYS", raising=False)
    result = runner.invoke(app, ["serve", "edge"])
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert "conclave.localhost/packs" in output
    assert "conclave log-key packs" in output and "EDGE_PACK_LOG=false" in output


def test_a_production_edge_with_its_packs_log_off_needs_no_key() -> None:
    settings = EdgeSettings(  # type: ignore[call-arg]
        _env_file=None, database_url=POSTGRES_URL, pack_log=False
    )
    assert settings.transparency_logs() == {}
    assert EdgeSettings(_env_file=None).transparency_logs() == {  # type: ignore[call-arg]
        "packs": "EDGE_PACK_LOG"
    }
