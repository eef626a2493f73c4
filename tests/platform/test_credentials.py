"""Which keys hold credentials, and redacting what they hold."""

from __future__ import annotations

import pytest

from conclave.platform.credentials import REDACTED, is_credential_key, redact


@pytest.mark.parametrize(
    "key",
    ["Authorization", "proxy-authorization", "X-Api-Key", "api_key", "access_token",
     "client_secret", "Password", "passwd", "Cookie", "Set-Cookie", "private_key", "auth"],
)  # fmt: skip
def test_credential_looking_keys(key: str) -> None:
    assert is_credential_key(key)


@pytest.mark.parametrize("key", ["author", "key", "url", "records_path", "monkey", "session"])
def test_ordinary_keys(key: str) -> None:
    assert not is_credential_key(key)


def test_redact_hides_values_under_credential_keys_and_keeps_references() -> None:
    document = {
        "sources": [
            {
                "url": "https://api.example.org",
                "headers": {"Authorization": "Bearer x", "Accept": "application/json"},
            },
            {"headers": {"X-Api-Key": {"secret": "weather"}}},
        ],
        "auth": {"user": "ann", "password": "y"},
    }
    assert redact(document) == {
        "sources": [
            {
                "url": "https://api.example.org",
                "headers": {"Authorization": REDACTED, "Accept": "application/json"},
            },
            {"headers": {"X-Api-Key": {"secret": "weather"}}},
        ],
        "auth": REDACTED,
    }
    assert document["auth"] == {"user": "ann", "password": "y"}  # a copy: the row is untouched


def test_redact_survives_any_depth() -> None:
    deep: dict[str, object] = {"token": "x"}
    for _ in range(100_000):
        deep = {"a": deep}
    redacted = redact(deep)
    for _ in range(100_000):
        redacted = redacted["a"]
    assert redacted == {"token": REDACTED}
