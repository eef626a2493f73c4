"""The request-source settings and the guard's corner cases on a bare platform app."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from conclave.platform.request_origin import RequestSources, loopback_only_warning
from conclave.settings import CommonSettings, GatewaySettings
from tests.conftest import serve_app
from tests.platform.conftest import demo_app


def test_the_default_is_loopback_on_any_port() -> None:
    settings = CommonSettings()
    assert settings.allowed_hosts == ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    assert settings.allowed_origins == [] and settings.cors_origins == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CONCLAVE_ALLOWED_ORIGINS", "null"),  # any sandboxed frame or file:// page sends it
        ("CONCLAVE_CORS_ORIGINS", "null"),
        ("CONCLAVE_ALLOWED_ORIGINS", "app.example.com"),  # no scheme
        ("CONCLAVE_ALLOWED_ORIGINS", "https://app.example.com/path"),
        ("CONCLAVE_ALLOWED_ORIGINS", "ftp://app.example.com"),
        ("CONCLAVE_ALLOWED_HOSTS", "https://app.example.com"),
        ("CONCLAVE_ALLOWED_HOSTS", "user@host"),
        ("CONCLAVE_ALLOWED_HOSTS", "host:port"),
        ("CONCLAVE_ALLOWED_HOSTS", "host .example"),
    ],
)
def test_settings_refuse_what_cannot_be_a_host_or_an_origin(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        CommonSettings()


def test_settings_are_lower_cased_and_the_mcp_hosts_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCLAVE_ALLOWED_HOSTS", "API.Example.com, gw.internal:*")
    monkeypatch.setenv("CONCLAVE_ALLOWED_ORIGINS", "HTTPS://App.Example.com/")
    monkeypatch.setenv("GATEWAY_MCP_ALLOWED_HOSTS", "mcp.example.com:8020")
    settings = GatewaySettings()
    assert settings.allowed_hosts == ["api.example.com", "gw.internal:*", "mcp.example.com:8020"]
    assert settings.allowed_origins == ["https://app.example.com"]
    # Unset, the MCP setting adds nothing: its default is the loopback default.
    monkeypatch.delenv("GATEWAY_MCP_ALLOWED_HOSTS")
    assert GatewaySettings().allowed_hosts == ["api.example.com", "gw.internal:*"]


def test_listening_beyond_loopback_with_loopback_names_is_warned_about() -> None:
    default = RequestSources(CommonSettings().allowed_hosts)
    warning = loopback_only_warning(default, "0.0.0.0")
    assert warning is not None and "CONCLAVE_ALLOWED_HOSTS" in warning and "421" in warning
    assert loopback_only_warning(default, "127.0.0.1") is None
    assert loopback_only_warning(default, "::1") is None
    named = RequestSources(["127.0.0.1:*", "gateway.internal:*"])
    assert loopback_only_warning(named, "0.0.0.0") is None
    assert loopback_only_warning(RequestSources(["*"]), "0.0.0.0") is None


async def test_cors_origins_with_any_port() -> None:
    app = demo_app(cors_origins="http://localhost:*")

    @app.post("/echo")
    async def echo(body: dict[str, str]) -> dict[str, str]:
        return body

    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    async with serve_app(app) as client:
        for origin in ("http://localhost:5173", "http://localhost"):
            answer = await client.options("/echo", headers={**preflight, "Origin": origin})
            assert answer.status_code == 200, (origin, answer.text)
            assert answer.headers["access-control-allow-origin"] == origin
        other_scheme = await client.options(
            "/echo", headers={**preflight, "Origin": "https://localhost:5173"}
        )
        assert other_scheme.status_code == 403
        assert other_scheme.json()["code"] == "ORIGIN_NOT_ALLOWED"
        sent = await client.post(
            "/echo", json={"a": "b"}, headers={"Origin": "http://localhost:5173"}
        )
        assert sent.json() == {"a": "b"}
        assert sent.headers["access-control-allow-origin"] == "http://localhost:5173"
