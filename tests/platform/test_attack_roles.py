"""An outside attacker's findings on CONCLAVE_ROLES, the setting (docs/security.md, "Roles"): each
test asserts what a correct deployment does, and fails on the code as it stands.

- The settings read every variable by its field name too (``populate_by_name=True`` makes
  pydantic-settings match the environment by name as well as by alias): a stray ``ROLES``
  variable in a container (set for another program) declares roles and gives them to users, or
  stops every service with a message about ``CONCLAVE_ROLES``, which nobody set. The same hole
  reads ``OPERATORS`` (makes its users operators) and ``AUTH`` (turns authentication off); only
  the ``CONCLAVE_`` names are documented.
- A member user id is said to be "one a user can have", but a reserved id (``bridge``, the
  Evidence bridge's) passes the start-up check.
- The roles claim string is split by ``str.split()`` (unit level; tests/gateway/
  test_attack_roles.py shows the effect through the gateway).
"""

from __future__ import annotations

import json
import time

import jwt
import pytest
from pydantic import ValidationError

from conclave.platform.auth import AuthConfig, Authenticator
from conclave.settings import CommonSettings, GatewaySettings
from conclave.settings.roles import declared_roles

SECRET = "attack-roles-secret-" + "x" * 24


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start from an environment without any Conclave variable, by alias or by field name."""
    for name, field in GatewaySettings.model_fields.items():
        if field.alias:
            monkeypatch.delenv(field.alias, raising=False)
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


# ---------------------------------------------------------------------------------------------
# Variables read by field name.
# ---------------------------------------------------------------------------------------------


def test_a_stray_roles_variable_declares_no_role(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only ``CONCLAVE_ROLES`` declares roles; a ``ROLES`` variable is another program's."""
    monkeypatch.setenv("ROLES", json.dumps({"analyst": ["mallory"]}))
    settings = GatewaySettings()
    assert settings.roles == {}, settings.roles
    assert settings.known_roles() == {"operator", "service"}


def test_a_stray_roles_variable_does_not_stop_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ROLES=web,worker`` (a deployment tool's own variable) must not stop every service with
    "CONCLAVE_ROLES is not JSON" when CONCLAVE_ROLES is not set at all."""
    monkeypatch.setenv("ROLES", "web,worker")
    try:
        settings = CommonSettings()
    except ValidationError as exc:  # what happens today
        pytest.fail(f"a ROLES variable stopped the start: {str(exc).splitlines()[:3]}")
    assert settings.roles == {}


@pytest.mark.parametrize(
    ("variable", "value", "field", "expected"),
    [
        ("OPERATORS", "mallory", "operators", []),
        ("SERVICE_USERS", "mallory", "service_users", []),
        ("AUTH", "disabled", "auth", None),  # None: the default, whatever it is
    ],
)
def test_privilege_settings_are_read_by_their_documented_names_only(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str, expected: object
) -> None:
    """Who is an operator or a service, and whether anyone must authenticate, come from the
    ``CONCLAVE_`` variables only (README, docs/security.md); a plain ``OPERATORS`` or ``AUTH``
    in the environment changes nothing."""
    default = getattr(GatewaySettings(), field) if expected is None else expected
    monkeypatch.setenv(variable, value)
    assert getattr(GatewaySettings(), field) == default


# ---------------------------------------------------------------------------------------------
# Member ids that no user can have.
# ---------------------------------------------------------------------------------------------


def test_a_reserved_user_id_listed_as_a_member_stops_the_start() -> None:
    """docs/gateway.md: "a user id listed must be one a user can have"; ``bridge`` is reserved
    for the Evidence bridge (no token, JWT or acting-user header may claim it)."""
    with pytest.raises(ValueError, match="CONCLAVE_ROLES"):
        declared_roles('{"analyst": ["bridge"]}')


# ---------------------------------------------------------------------------------------------
# The claim string, at the authenticator.
# ---------------------------------------------------------------------------------------------


def _authenticator() -> Authenticator:
    return Authenticator(
        AuthConfig(
            enabled=True,
            tokens={},
            jwt_secret=SECRET,
            declared_roles={"analyst": frozenset()},
        )
    )


def _header(roles: object) -> str:
    claims = {"sub": "mallory", "exp": int(time.time()) + 60, "roles": roles}
    return "Bearer " + jwt.encode(claims, SECRET, algorithm="HS256")


@pytest.mark.parametrize("separator", ["\u00a0", "\u3000", "\x1c", "\x85", "\u2029"])
def test_only_the_space_separates_names_in_a_roles_claim_string(separator: str) -> None:
    principal = _authenticator().authenticate(
        _header(f"Ops{separator}operator Data{separator}analyst")
    )
    assert principal.roles == frozenset(), principal.roles
    assert not principal.is_operator
