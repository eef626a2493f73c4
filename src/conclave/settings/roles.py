"""``CONCLAVE_ROLES``: the deployment's own roles, beside the built-in ``operator`` and
``service``, and the statically configured users each one is given.

A JSON object, role name to a list of user ids: ``{"analyst": ["alice", "bob"], "auditor": []}``.
A role with no members here can still be held through a JWT's roles claim. The value is checked
whole at start: a policy rule naming a role that was misspelt here would never match, so a
doubtful value stops the service instead of being half used."""

from __future__ import annotations

import json
import re
from typing import Any

BUILT_IN_ROLES = frozenset({"operator", "service"})
"""The roles Conclave itself acts on (the platform's ``OPERATOR`` and ``SERVICE``)."""
ROLE_NAME_PATTERN = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
"""What a declared role's name looks like (whole match): lower case, so that a role in a policy
file, a JWT claim and this setting is spelt one way only."""
MAX_DECLARED_ROLES = 100
MAX_ROLE_MEMBERS = 1000
"""Most user ids one role lists here; more belong in the identity provider's roles claim."""
RESERVED_MEMBER_IDS = frozenset({"bridge"})
"""Ids of Conclave's own processes (the platform's ``RESERVED_USER_IDS``): no user has one."""
MAX_MEMBER_ID_LENGTH = 256
"""Longest user id (the platform's ``MAX_USER_ID_LENGTH``): a longer one can never sign in."""


def role_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a role (built-in or declared), or ``None`` when it can."""
    if name in BUILT_IN_ROLES or ROLE_NAME_PATTERN.fullmatch(name):
        return None
    return (
        "must be lower-case letters, digits, '_', '.' or '-', starting with a letter, "
        "at most 64 characters"
    )


def declared_roles(value: object) -> dict[str, list[str]]:
    """``CONCLAVE_ROLES`` (JSON text, or the mapping itself when passed by name) as role name to
    member user ids; ``ValueError`` says what is wrong."""
    if isinstance(value, str):
        value = _parsed(value)
    if not isinstance(value, dict):
        raise ValueError('CONCLAVE_ROLES must be a JSON object like {"analyst": ["alice"]}')
    if len(value) > MAX_DECLARED_ROLES:
        raise ValueError(f"CONCLAVE_ROLES declares more than {MAX_DECLARED_ROLES} roles")
    return {_checked_name(name): _checked_members(name, members) for name, members in value.items()}


def _parsed(text: str) -> Any:
    if not text.strip():
        return {}
    try:
        return json.loads(text, object_pairs_hook=_refusing_repeated_names)
    except RecursionError:
        raise ValueError("CONCLAVE_ROLES is nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"CONCLAVE_ROLES is not JSON: {exc}") from None


def _refusing_repeated_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON keeps the last of two equal keys: the members listed under the first would silently
    # lose the role.
    document: dict[str, Any] = {}
    for key, item in pairs:
        if key in document:
            raise ValueError(f"CONCLAVE_ROLES names {_shown(key)} twice")
        document[key] = item
    return document


def _checked_name(name: object) -> str:
    if not isinstance(name, str):
        raise ValueError("CONCLAVE_ROLES: role names must be text")
    if name in BUILT_IN_ROLES:
        raise ValueError(
            f"CONCLAVE_ROLES: {name!r} is a built-in role (give it with "
            "CONCLAVE_OPERATORS / CONCLAVE_SERVICE_USERS)"
        )
    problem = role_name_problem(name)
    if problem is not None:
        raise ValueError(f"CONCLAVE_ROLES: role name {_shown(name)} {problem}")
    return name


def _checked_members(name: str, members: object) -> list[str]:
    if not isinstance(members, list) or not all(isinstance(user, str) for user in members):
        raise ValueError(f"CONCLAVE_ROLES: the members of {name!r} must be a list of user ids")
    if len(members) > MAX_ROLE_MEMBERS:
        raise ValueError(f"CONCLAVE_ROLES: {name!r} lists more than {MAX_ROLE_MEMBERS} users")
    for user in members:
        if (
            not user
            or len(user) > MAX_MEMBER_ID_LENGTH
            or not _printable(user)
            or user in RESERVED_MEMBER_IDS
        ):
            raise ValueError(
                f"CONCLAVE_ROLES: {name!r} lists the user id {_shown(user)}, which no user can "
                f"have (empty, over {MAX_MEMBER_ID_LENGTH} characters, control characters, or "
                "reserved for Conclave's own processes)"
            )
    return list(members)


def _printable(text: str) -> bool:
    """No control character, no lone surrogate (an environment value that was not UTF-8 holds
    them, and no store or response can carry one)."""
    return not any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) <= 0xDFFF for c in text)


def _shown(text: str) -> str:
    """``text`` quoted for an error message, escaped to ASCII (no control character or lone
    surrogate reaches a terminal or a log) and cut short."""
    return ascii(text[:80]) + ("..." if len(text) > 80 else "")
