"""``GET /policy`` and ``GET /policy/check``: the tool policy and its dry run."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request

from conclave.gateway.api import Service
from conclave.gateway.policy import Decision, Subject, ToolPolicy, hidden_from, subject_of
from conclave.gateway.policy_models import MatchedRule, PolicyCheckRead, PolicyRead, PolicyRuleRead
from conclave.gateway.tools import Tool
from conclave.platform.auth import MAX_USER_ID_LENGTH, Authenticator, Principal, user_id_problem
from conclave.platform.errors import Forbidden, NotFound, Unprocessable
from conclave.platform.http import CurrentPrincipal
from conclave.platform.openapi import problem_responses
from conclave.platform.problem_types import ProblemCode

policy_router = APIRouter(tags=["policy"])
MAX_ROLES_QUERY_LENGTH = 2000
"""Room for a few dozen declared role names (each at most 64 characters) in one dry run."""


@policy_router.get(
    "/policy", responses=problem_responses(403, s403="You are no operator (FORBIDDEN)")
)
async def read_policy(service: Service, principal: CurrentPrincipal) -> PolicyRead:
    """The tool policy's rules in order, and its default (operators)."""
    if not principal.is_operator:
        raise Forbidden("Only operators may read the tool policy.")
    policy = service.policy
    rules = [
        PolicyRuleRead(
            index=index,
            effect=rule.effect,
            subjects=rule.subjects,
            tools=rule.tools,
            actions=rule.actions,
            description=rule.description,
            text=rule.text(),
        )
        for index, rule in enumerate(policy.rules)
    ]
    return PolicyRead(configured=policy.configured, default=policy.default, rules=rules)


@policy_router.get(
    "/policy/check",
    responses=problem_responses(
        403,
        404,
        422,
        s403="`user` names another user or `roles` is given, and you are no operator (FORBIDDEN)",
        s404="No tool you may see has this name (UNKNOWN_TOOL)",
        s422="`user` or `roles` is not usable (VALIDATION_FAILED)",
    ),
)
async def check_policy(
    service: Service,
    principal: CurrentPrincipal,
    request: Request,
    tool: Annotated[str, Query(min_length=1, max_length=256, description="Tool name or alias.")],
    action: Literal["list", "call"] = "call",
    user: Annotated[
        str | None,
        Query(max_length=MAX_USER_ID_LENGTH, description="Whose rights (operators: anyone's)."),
    ] = None,
    roles: Annotated[
        str | None,
        Query(
            max_length=MAX_ROLES_QUERY_LENGTH,
            description="Comma-separated roles to assume (operators): built-in or declared in "
            "CONCLAVE_ROLES.",
        ),
    ] = None,
) -> PolicyCheckRead:
    """Could a user (you, unless an operator names another) list or call a tool, and why: the
    deciding rule and a reason. Nothing runs and nothing is recorded."""
    subject = _subject(principal, request, user, roles)
    registry = service.registry
    alias = registry.alias(tool)
    registered = registry.resolve(alias.alias.canonical if alias else tool)
    if registered is None:
        raise NotFound(f"No tool is called {tool[:128]!r}.", code=ProblemCode.UNKNOWN_TOOL)
    named = (alias.view, registered.tool) if alias else (registered.tool,)
    policy = service.policy
    if not principal.is_operator and _hidden(policy, subject, named):
        # As for a call: a tool the caller may neither list nor call is answered as missing.
        raise NotFound(f"No tool is called {tool[:128]!r}.", code=ProblemCode.UNKNOWN_TOOL)
    decision = _decision(policy, subject, named, action)
    matched = None
    if decision.rule is not None:
        rule = policy.rules[decision.rule]
        text = rule.text() if principal.is_operator else None
        matched = MatchedRule(index=decision.rule, effect=rule.effect, text=text)
    return PolicyCheckRead(
        user=subject.user_id,
        roles=sorted(subject.roles),
        tool=tool,
        action=action,
        allowed=decision.allowed,
        rule=matched,
        reason=decision.reason,
    )


def _subject(
    principal: Principal, request: Request, user: str | None, roles: str | None
) -> Subject:
    """Whom the dry run is about: the caller, or (operators) any user with the roles settings
    give them, or the roles given."""
    about_self = user is None or user == principal.user_id
    if about_self and roles is None:
        return subject_of(principal)
    if not principal.is_operator:
        raise Forbidden("Only operators may ask about another user or other roles.")
    user = principal.user_id if user is None else user
    problem = user_id_problem(user)
    if problem is not None:
        raise Unprocessable(f"user {problem}.")
    authenticator: Authenticator = request.app.state.authenticator
    if roles is None:
        return Subject(user, authenticator.roles_of(user))
    named = {name.strip() for name in roles.split(",") if name.strip()}
    unknown = named - authenticator.known_roles
    if unknown:
        known = ", ".join(sorted(authenticator.known_roles))
        raise Unprocessable(f"roles: unknown role(s) {sorted(unknown)!r} (known: {known}).")
    return Subject(user, frozenset(named))


def _hidden(policy: ToolPolicy, subject: Subject, named: tuple[Tool, ...]) -> bool:
    return any(hidden_from(policy, subject, tool) for tool in named)


def _decision(
    policy: ToolPolicy, subject: Subject, named: tuple[Tool, ...], action: Literal["list", "call"]
) -> Decision:
    """The decision about the tool named and, for an alias tool, its canonical tool: the first
    refusal, else the named tool's permission."""
    decisions = [policy.decide(subject, tool, action) for tool in named]
    return next((d for d in decisions if not d.allowed), decisions[0])
