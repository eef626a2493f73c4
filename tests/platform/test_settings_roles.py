"""CONCLAVE_ROLES, the deployment's own roles (docs/security.md, "Roles"): a JSON object of role
name to member user ids, checked whole; a doubtful value stops the start with a message that
names the setting and what is wrong."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from conclave.platform.auth import BUILT_IN_ROLES, MAX_USER_ID_LENGTH, RESERVED_USER_IDS
from conclave.settings import CommonSettings, GatewaySettings
from conclave.settings import roles as role_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start from an environment without any Conclave variable."""
    for field in GatewaySettings.model_fields.values():
        if field.alias:
            monkeypatch.delenv(field.alias, raising=False)


def test_roles_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CommonSettings().roles == {}
    assert CommonSettings().known_roles() == {"operator", "service"}
    declared = {"analyst": ["alice", "bob"], "auditor": [], "fin.ops-2": ["José"]}
    monkeypatch.setenv("CONCLAVE_ROLES", json.dumps(declared))
    settings = GatewaySettings()
    assert settings.roles == declared
    assert settings.known_roles() == {"operator", "service", "analyst", "auditor", "fin.ops-2"}
    monkeypatch.setenv("CONCLAVE_ROLES", "  ")
    assert CommonSettings().roles == {}


def test_roles_can_be_passed_by_name() -> None:
    assert CommonSettings(roles={"analyst": ["alice"]}).roles == {"analyst": ["alice"]}
    assert CommonSettings(roles='{"analyst": []}').roles == {"analyst": []}


def _many_roles(count: int) -> str:
    return json.dumps({f"role-{i}": [] for i in range(count)})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"analyst": ["al\\u0000ice"]}', "lists the user id 'al\\\\x00ice'"),
        ('{"analyst": ["\\ud800"]}', "lists the user id '\\\\ud800'"),
        ('{"an\\ud800alyst": []}', "role name 'an\\\\ud800alyst' must be lower-case"),
        ('{"ana\\u0000lyst": []}', "role name 'ana\\\\x00lyst' must be lower-case"),
        ('{"Analyst": []}', "role name 'Analyst' must be lower-case"),
        ('{"1st-line": []}', "starting with a letter"),
        ('{"role:analyst": []}', "must be lower-case"),
        ('{"two words": []}', "must be lower-case"),
        ('{"": []}', "must be lower-case"),
        (json.dumps({"a" * 65: []}), "at most 64 characters"),
        ('{"operator": ["ann"]}', "'operator' is a built-in role"),
        ('{"service": []}', "'service' is a built-in role"),
        (_many_roles(101), "more than 100 roles"),
        (json.dumps({"analyst": [f"u{i}" for i in range(1001)]}), "more than 1000 users"),
        ('{"analyst": "alice"}', "must be a list of user ids"),
        ('{"analyst": [1]}', "must be a list of user ids"),
        ('{"analyst": [""]}', "lists the user id ''"),
        (json.dumps({"analyst": ["u" * 257]}), "over 256 characters"),
        ('{"analyst": ["a"], "analyst": ["b"]}', "names 'analyst' twice"),
        ('["analyst"]', "must be a JSON object"),
        ("analyst=alice", "CONCLAVE_ROLES is not JSON"),
        ("[" * 100_000, "CONCLAVE_ROLES is nested too deeply|not JSON"),
    ],
    ids=lambda value: value[:24] if isinstance(value, str) else None,
)
def test_a_bad_value_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.setenv("CONCLAVE_ROLES", value)
    with pytest.raises(ValidationError, match=message) as caught:
        GatewaySettings()
    assert "CONCLAVE_ROLES" in str(caught.value)


def test_a_value_that_was_not_utf_8_stops_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    # The environment holds bytes; Python hands undecodable ones over as lone surrogates.
    monkeypatch.setenv("CONCLAVE_ROLES", '{"analyst": ["al\udcffice"]}')
    with pytest.raises(ValidationError, match="lists the user id 'al\\\\udcffice'"):
        CommonSettings()


@pytest.mark.parametrize("value", [{"analyst": None}, {1: []}, ["analyst"], 7])
def test_a_bad_value_passed_by_name_is_refused(value: Any) -> None:
    with pytest.raises(ValidationError, match="CONCLAVE_ROLES"):
        CommonSettings(roles=value)


def test_the_settings_and_the_platform_agree_on_built_in_roles_and_user_ids() -> None:
    # Settings import nothing of Conclave, so these facts are written twice.
    assert role_settings.BUILT_IN_ROLES == BUILT_IN_ROLES
    assert role_settings.MAX_MEMBER_ID_LENGTH == MAX_USER_ID_LENGTH
    assert role_settings.RESERVED_MEMBER_IDS == RESERVED_USER_IDS
