"""An outside attacker's findings on the deployment's own roles (CONCLAVE_ROLES): each test asserts
what a correct deployment does, and fails on the code as it stands.

- A JWT roles claim given as one string is split on *any* Unicode whitespace (and on the ASCII
  information separators U+001C-U+001F), not on the space the docs promise: one foreign role name
  holding a no-break space or an ideographic space ("Ops\u00a0operator", another application's
  role an identity provider passes along) becomes the built-in ``operator`` role or a declared
  one, and opens what the policy keeps for it.
- The console keeps every role ``/whoami`` lists in its sealed session cookie; a user given many
  declared roles (the setting allows 100 of 64 characters) cannot sign in at all, and is told to
  use "a shorter token or a user id of fewer characters", neither of which is at fault.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import jwt
import pytest

from conclave.console.app import create_app as create_console
from conclave.console.session import COOKIE_NAME, MAX_CREDENTIAL_CHARS
from conclave.gateway.app import create_app
from conclave.gateway.tools import Tool
from conclave.settings import ConsoleSettings
from tests.conftest import Backend, open_platform, test_settings
from tests.gateway.test_tool_policy import SECRET, _catalogue
from tests.gateway.test_tool_policy_roles import POLICY, _bearer, _gateway
from tests.httpserver import running_server

COUNT = {"tool": "billing.count", "args": {}}

# ---------------------------------------------------------------------------------------------
# 1. The string form of the roles claim: only the space separates names.
# ---------------------------------------------------------------------------------------------

# One role name each, as an identity provider would pass another application's role along: the
# separator inside is not the ASCII space the docs name ("one space-separated string").
FOREIGN_OPERATOR_NAMES = [
    "Ops\u00a0operator",  # NO-BREAK SPACE
    "Ops\u3000operator",  # IDEOGRAPHIC SPACE
    "Ops\u2003operator",  # EM SPACE
    "Ops\u202foperator",  # NARROW NO-BREAK SPACE
    "Ops\x1coperator",  # FILE SEPARATOR (a control character, not whitespace to anyone but str)
    "Ops\x85operator",  # NEXT LINE
    "Ops\u2028operator",  # LINE SEPARATOR
]


@pytest.mark.parametrize(
    "claim", FOREIGN_OPERATOR_NAMES, ids=[hex(ord(n[3])) for n in FOREIGN_OPERATOR_NAMES]
)
async def test_a_foreign_role_name_with_unicode_whitespace_is_not_the_operator_role(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path, claim: str
):
    """A claim string holding one foreign name (``Ops<U+00A0>operator``) must not make its
    holder an operator: no operator's ``GET /policy``, no operator's ``/whoami``."""
    headers = _bearer("mallory", claim)
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        who = await client.get("/whoami", headers=headers)
        rules = await client.get("/policy", headers=headers)  # operators only
        slow = await client.post("/execute", json={"tool": "slow", "args": {}}, headers=headers)
    assert who.status_code == 200
    assert "operator" not in who.json()["roles"], who.json()
    assert rules.status_code == 403, rules.text[:200]
    # 'slow' is open to role:operator only (rule 0): hidden from everyone else.
    assert slow.status_code == 404 and slow.json()["code"] == "UNKNOWN_TOOL", slow.text[:200]


async def test_a_foreign_role_name_with_a_no_break_space_does_not_hold_a_declared_role(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    """``Finance\u00a0analyst`` (one role of another application) is not ``analyst``: the
    billing tools the policy opens to analysts stay hidden."""
    headers = _bearer("mallory", "Finance\u00a0analyst")
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        who = (await client.get("/whoami", headers=headers)).json()
        counted = await client.post("/execute", json=COUNT, headers=headers)
    assert who["roles"] == [], who
    assert counted.status_code == 404, counted.text[:200]


async def test_a_space_separated_claim_still_works_after_the_fix(
    backend: Backend, test_tools: tuple[Tool, ...], tmp_path: Path
):
    """The control: the ASCII space does separate names (this passes today and must keep
    passing)."""
    async with _gateway(backend, test_tools, _catalogue(tmp_path, POLICY)) as client:
        who = (await client.get("/whoami", headers=_bearer("carol", "analyst  auditor"))).json()
    assert who["roles"] == ["analyst", "auditor"]


# ---------------------------------------------------------------------------------------------
# 2. The console: a user with many declared roles can still sign in.
# ---------------------------------------------------------------------------------------------

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
# 80 declared roles (the setting allows 100) with names a deployment might choose.
MANY_ROLES = [f"project-{i:02d}-contributors.emea-readers" for i in range(80)]
# 46 roles carried in a JWT's claim: the token stays under the console's credential limit.
CLAIMED_ROLES = [f"team-{i:02d}.finance-readers-eu" for i in range(46)]


def _console_jwt(sub: str, roles: list[str]) -> str:
    now = int(time.time())
    return jwt.encode(
        {"sub": sub, "iat": now, "exp": now + 600, "roles": roles}, SECRET, algorithm="HS256"
    )


async def _sign_in(console: str, credential: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=console) as client:
        form = await client.get("/signin")
        found = CSRF.search(form.text)
        assert found is not None, form.text[:300]
        answer = await client.post("/signin", data={"csrf_token": found.group(1),
                                                    "token": credential})  # fmt: skip
        if answer.status_code == 303:
            # The session works: the next page is served, not sent back to sign in.
            page = await client.get("/")
            assert "/signin" not in str(page.url), "the session cookie was not kept"
        return answer


@pytest.mark.parametrize("how", ["setting", "jwt-claim"])
async def test_a_user_with_many_declared_roles_can_sign_in_to_the_console(
    backend: Backend, tmp_path: Path, how: str
):
    roles = MANY_ROLES if how == "setting" else CLAIMED_ROLES
    declared = {name: (["lena"] if how == "setting" else []) for name in roles}
    settings = test_settings(
        auth="enabled",
        api_tokens="tok-lena=lena",
        jwt_secret=SECRET,
        roles=json.dumps(declared),
    )
    credential = "tok-lena" if how == "setting" else _console_jwt("lena", CLAIMED_ROLES)
    assert len(credential) <= MAX_CREDENTIAL_CHARS  # a credential the console accepts
    async with open_platform(backend, settings) as platform:
        gateway = create_app(settings, platform=platform)
        async with running_server(gateway) as gateway_url:
            async with httpx.AsyncClient(base_url=gateway_url) as api:
                who = await api.get("/whoami", headers={"Authorization": f"Bearer {credential}"})
            assert who.status_code == 200 and sorted(who.json()["roles"]) == sorted(roles)
            closed = "http://127.0.0.1:9"
            console_settings = ConsoleSettings(
                gateway_url=gateway_url, collector_url=closed, graph_url=closed, edge_url=closed
            )
            async with running_server(create_console(console_settings)) as console:
                answer = await _sign_in(console, credential)
    shown = re.search(r"Identity too long[^<]*|This credential[^<]*", answer.text)
    assert answer.status_code == 303, (answer.status_code, shown and shown.group(0))
    cookie = next(
        (c for c in answer.headers.get_list("set-cookie") if c.startswith(COOKIE_NAME)), ""
    )
    assert cookie and len(cookie) <= 4096  # what a browser keeps
