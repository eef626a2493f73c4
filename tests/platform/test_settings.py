"""Settings resolve the store and bus URLs from the environment the way the docs promise."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlalchemy.engine import make_url

from conclave.settings import CommonSettings, GatewaySettings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start from an environment without any Conclave variable."""
    for field in GatewaySettings.model_fields.values():
        if field.alias:
            monkeypatch.delenv(field.alias, raising=False)


def test_explicit_database_url_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCLAVE_DATABASE_URL", "postgresql+asyncpg://u@db/explicit")
    monkeypatch.setenv("RELDB_HOST", "ignored")
    assert CommonSettings().resolved_database_url() == "postgresql+asyncpg://u@db/explicit"


def test_reldb_variables_build_a_postgres_url(monkeypatch: pytest.MonkeyPatch) -> None:
    password = "p@ss:w/rd %#?"
    monkeypatch.setenv("RELDB_HOST", "db.internal")
    monkeypatch.setenv("RELDB_PORT", "6543")
    monkeypatch.setenv("RELDB_DB", "conclave_prod")
    monkeypatch.setenv("RELDB_USER", "svc@conclave")
    monkeypatch.setenv("RELDB_PASSWORD", password)
    url = CommonSettings().resolved_database_url()
    parsed = make_url(url)
    assert parsed.drivername == "postgresql+asyncpg"
    assert (parsed.host, parsed.port, parsed.database) == ("db.internal", 6543, "conclave_prod")
    assert (parsed.username, parsed.password) == ("svc@conclave", password)
    assert password not in url  # quoted, not pasted raw


def test_reldb_without_password_has_no_empty_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELDB_HOST", "db")
    assert (
        CommonSettings().resolved_database_url() == "postgresql+asyncpg://postgres@db:5432/conclave"
    )


def test_default_store_is_sqlite_in_the_data_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CONCLAVE_DATA_DIR", str(tmp_path / "state"))
    url = CommonSettings().resolved_database_url()
    assert url == f"sqlite+aiosqlite:///{(tmp_path / 'state' / 'conclave.db').resolve()}"


def test_bus_url_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CommonSettings().resolved_bus_url() == "memory://"
    monkeypatch.setenv("BUS_HOST", "redis.internal")
    monkeypatch.setenv("BUS_PORT", "6380")
    assert CommonSettings().resolved_bus_url() == "redis://redis.internal:6380/0"
    monkeypatch.setenv("CONCLAVE_BUS_URL", "rediss://secure:6390/2")
    assert CommonSettings().resolved_bus_url() == "rediss://secure:6390/2"


def test_tool_modules_is_a_comma_list(monkeypatch: pytest.MonkeyPatch) -> None:
    assert GatewaySettings().tool_modules == []
    monkeypatch.setenv("GATEWAY_TOOL_MODULES", " acme.tools , other.plugin:TOOLS ,, ")
    assert GatewaySettings().tool_modules == ["acme.tools", "other.plugin:TOOLS"]


def test_fields_can_be_passed_by_name() -> None:
    settings = GatewaySettings(auth="disabled", max_body_bytes=10, tool_modules=["a.b"])
    assert (settings.auth, settings.max_body_bytes, settings.tool_modules) == (
        "disabled", 10, ["a.b"],
    )  # fmt: skip


def test_auth_is_active_only_when_enabled_and_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not CommonSettings().auth_active()  # enabled, nothing configured: the CLI refuses
    monkeypatch.setenv("CONCLAVE_API_TOKENS", "t=alice")
    assert CommonSettings().auth_active()
    monkeypatch.setenv("CONCLAVE_AUTH", "disabled")
    assert not CommonSettings().auth_active()
    monkeypatch.setenv("CONCLAVE_AUTH", "off")
    with pytest.raises(ValidationError):
        CommonSettings()


def test_secrets_do_not_leak_into_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELDB_PASSWORD", "hunter2-db")
    monkeypatch.setenv("CONCLAVE_API_TOKENS", "hunter2-token=alice")
    monkeypatch.setenv("CONCLAVE_JWT_SECRET", "hunter2-jwt-secret-of-at-least-32-bytes")
    text = repr(GatewaySettings()) + str(GatewaySettings().model_dump())
    assert "hunter2" not in text
