"""The shapes of ``GET /policy`` and ``GET /policy/check`` (the tool policy's dry run)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class PolicyRuleRead(BaseModel):
    """One rule of the tool policy, in its order."""

    index: int
    effect: Literal["allow", "deny"]
    subjects: list[str]
    tools: list[str]
    actions: list[Literal["list", "call"]]
    description: str | None
    text: str


class PolicyRead(BaseModel):
    """The tool policy: its rules and what applies when none matches."""

    configured: bool
    """False: no rule and no default declared, everyone may list and call every tool."""
    default: Literal["allow", "deny"]
    rules: list[PolicyRuleRead]


class MatchedRule(BaseModel):
    """The rule that decided a dry run. ``text`` is shown to operators only: a rule may name
    tools the asking user may not see."""

    index: int
    effect: Literal["allow", "deny"]
    text: str | None


class PolicyCheckRead(BaseModel):
    """Could ``user`` ``action`` ``tool``, and why."""

    user: str
    roles: list[str]
    tool: str
    action: Literal["list", "call"]
    allowed: bool
    rule: MatchedRule | None
    """``None``: no rule matched and the default decided."""
    reason: str
