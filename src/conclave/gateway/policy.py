"""Per-tool access policy: which users and roles may list and call which tools.

Declared in the ``policy:`` section of a catalogue file (docs/gateway.md, "Tool policy")::

    policy:
      default: deny                 # optional; deny once any rule exists, allow with none
      rules:
        - effect: allow
          subjects: [role:operator]
          tools: ["*"]
        - effect: deny
          subjects: ["*"]
          actions: [call]
          tools: [upstream:everything/print*, tag:admin]
        - effect: allow
          subjects: [user:ann, role:service]
          actions: [list, call]     # both unless said
          tools: [echo, entity_*, upstream:time/*]

Rules are read in order (the files in their order, each file's rules in theirs) and the first
whose subject, action and tool all match decides. Subjects: ``*``, ``user:<id>`` (exact),
``role:<name>`` (a built-in role or one the deployment declares in ``CONCLAVE_ROLES``: the
catalogue is validated with :func:`policy_context`, and a role nobody can hold stops the start,
since its rule could never match). Tools: a glob on the tool's catalogue name (``*`` any
run of characters, ``?`` one; nothing else is special), ``tag:<tag>``, or
``upstream:<server glob>/<tool glob>`` on an upstream server's name and the tool's own name there.

Globs are matched by :func:`glob_matches`, which takes each piece between stars at its leftmost
place and never retries one (C string searches for pieces without ``?``; at worst time
proportional to the lengths' product, both bounded): no regular expression built from
configuration ever runs on a name a caller or an upstream sent.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from conclave.gateway.registry import RegisteredAlias, RegisteredTool, ToolRegistry
from conclave.gateway.tools import Tool
from conclave.platform.auth import BUILT_IN_ROLES, MAX_USER_ID_LENGTH, Principal, user_id_problem
from conclave.platform.problem_types import ProblemCode

log = logging.getLogger(__name__)

Action = Literal["list", "call"]
Effect = Literal["allow", "deny"]
ACTIONS: tuple[Action, ...] = ("list", "call")
MAX_PATTERN_LENGTH = 200
MAX_RULES = 1000


def glob_matches(pattern: str, text: str) -> bool:
    """Whether ``text`` matches ``pattern`` (``*``: any run of characters, ``?``: one).

    The pattern is cut at its stars into pieces: the first must start the text, the last end it,
    and each one between is taken at its leftmost place after the previous (a leftmost place
    never loses a match another place would win, so nothing is ever retried). A piece without
    ``?`` is found by ``str.find``, in C; a piece with ``?`` by its longest plain run, each place
    where that occurs then checked (at most the piece's length per character of the text). The
    cost is bounded by the text's length times the pattern's and never exponential, and for the
    common shapes (a name, ``prefix*``, ``*suffix``, ``*part*``) it is a few C string searches
    whatever the text."""
    if "*" not in pattern:
        return len(pattern) == len(text) and _piece_fits(pattern, text, 0)
    pieces = pattern.split("*")
    first, middle, last = pieces[0], pieces[1:-1], pieces[-1]
    if len(first) + len(last) > len(text):
        return False
    if not _piece_fits(first, text, 0) or not _piece_fits(last, text, len(text) - len(last)):
        return False
    start, end = len(first), len(text) - len(last)
    for piece in middle:
        found = _find_piece(piece, text, start, end)
        if found < 0:
            return False
        start = found + len(piece)
    return True


def _piece_fits(piece: str, text: str, at: int) -> bool:
    """Whether ``piece`` (no ``*``) matches ``text`` at ``at`` (``?``: any one character)."""
    if "?" not in piece:
        return text.startswith(piece, at)
    if at + len(piece) > len(text):
        return False
    return all(want == "?" or want == text[at + i] for i, want in enumerate(piece))


def _find_piece(piece: str, text: str, start: int, end: int) -> int:
    """The leftmost place in ``text[start:end]`` where ``piece`` (no ``*``) matches, or -1."""
    if "?" not in piece:
        return text.find(piece, start, end)
    # Only the places where the piece's longest run of plain characters occurs can match: they
    # are found by C string search and each checked, so a name holding no such run costs one
    # search, not a check per character.
    anchor = max(piece.split("?"), key=len)
    if not anchor:
        return start if start + len(piece) <= end else -1
    offset = piece.index(anchor)
    limit = end - (len(piece) - offset - len(anchor))
    if limit < start + offset + len(anchor):
        return -1  # no room (and a negative limit would count from the text's end)
    found = text.find(anchor, start + offset, limit)
    while found >= 0:
        if _piece_fits(piece, text, found - offset):
            return found - offset
        found = text.find(anchor, found + 1, limit)
    return -1


def _checked_pattern(value: str, what: str) -> str:
    if not value:
        raise ValueError(f"{what} is empty")
    if len(value) > MAX_PATTERN_LENGTH:
        raise ValueError(f"{what} is longer than {MAX_PATTERN_LENGTH} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise ValueError(f"{what} holds control characters or lone surrogates")
    return value


def policy_context(known_roles: frozenset[str]) -> dict[str, Any]:
    """The validation context of a catalogue's ``policy:`` section: the roles its subjects may
    name (the authenticator's :attr:`~conclave.platform.auth.Authenticator.known_roles`).
    Without it, only the built-in roles are known."""
    return {"known_roles": known_roles}


def _checked_subject(subject: str, known_roles: frozenset[str]) -> str:
    if subject == "*":
        return subject
    kind, sep, value = subject.partition(":")
    if not sep or kind not in ("user", "role"):
        raise ValueError(
            f"subject {subject[:MAX_USER_ID_LENGTH]!r} must be '*', 'user:<id>' or 'role:<name>'"
        )
    if kind == "role" and value not in known_roles:
        known = ", ".join(sorted(known_roles))
        raise ValueError(
            f"subject {subject[:MAX_USER_ID_LENGTH]!r}: unknown role {value[:MAX_PATTERN_LENGTH]!r}"
            f" (known: {known}; a deployment declares its own in CONCLAVE_ROLES)"
        )
    problem = user_id_problem(value) if kind == "user" else None
    if problem is not None:
        raise ValueError(f"subject {subject[:MAX_USER_ID_LENGTH]!r}: the user id {problem}")
    return subject


def _checked_tool_selector(selector: str) -> str:
    _checked_pattern(selector, f"tool selector {selector[:MAX_PATTERN_LENGTH]!r}")
    kind, sep, value = selector.partition(":")
    if not sep:
        return selector  # a glob on the catalogue name (tool names hold no ':')
    if kind == "tag":
        _checked_pattern(value, f"tool selector {selector!r}: the tag")
    elif kind == "upstream":
        server, slash, tool = value.partition("/")
        if not slash:
            raise ValueError(f"tool selector {selector!r} must be 'upstream:<server>/<tool>'")
        _checked_pattern(server, f"tool selector {selector!r}: the server")
        _checked_pattern(tool, f"tool selector {selector!r}: the tool")
    else:
        raise ValueError(
            f"tool selector {selector!r} must be a name glob, 'tag:<tag>' or "
            "'upstream:<server>/<tool>'"
        )
    return selector


class PolicyRuleSpec(BaseModel):
    """One rule of a ``policy:`` section."""

    model_config = {"extra": "forbid"}

    effect: Effect
    subjects: list[str] = Field(min_length=1, max_length=MAX_RULES)
    tools: list[str] = Field(min_length=1, max_length=MAX_RULES)
    actions: list[Action] = Field(default_factory=lambda: list(ACTIONS), min_length=1)
    description: str | None = Field(None, max_length=500)

    @field_validator("subjects")
    @classmethod
    def _subjects(cls, subjects: list[str], info: ValidationInfo) -> list[str]:
        context = info.context or {}
        known_roles: frozenset[str] = context.get("known_roles", BUILT_IN_ROLES)
        return [_checked_subject(subject, known_roles) for subject in subjects]

    @field_validator("tools")
    @classmethod
    def _tools(cls, tools: list[str]) -> list[str]:
        return [_checked_tool_selector(selector) for selector in tools]

    def text(self) -> str:
        """The rule in one line, as ``GET /policy`` and the dry run show it."""
        return (
            f"{self.effect} {', '.join(self.actions)} of {', '.join(self.tools)} "
            f"to {', '.join(self.subjects)}"
        )


class PolicySpec(BaseModel):
    """A catalogue file's ``policy:`` section."""

    model_config = {"extra": "forbid"}

    default: Effect | None = None
    rules: list[PolicyRuleSpec] = Field(default_factory=list, max_length=MAX_RULES)


@dataclass(frozen=True, slots=True)
class Subject:
    """Who asks: a user id and the roles of the principal acting as that user."""

    user_id: str
    roles: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer: ``rule`` is the index of the deciding rule (``None``: the default)."""

    allowed: bool
    rule: int | None
    reason: str


class ToolPolicy:
    """The ordered rules of every catalogue file, and the default when none matches."""

    def __init__(self, rules: Iterable[PolicyRuleSpec] = (), default: Effect | None = None):
        self.rules: tuple[PolicyRuleSpec, ...] = tuple(rules)
        # No rule at all: the gateway as it was, everyone may list and call everything. Once a
        # rule exists, what it does not mention is refused unless the policy says otherwise.
        self.default: Effect = default or ("deny" if self.rules else "allow")
        # Which rules select a tool depends on the tool alone, so it is worked out once per tool
        # (the object: an upstream refresh brings new ones) and a listing of many tools costs a
        # subject check per selecting rule, not a glob match per rule and tool. The memory holds
        # each tool weakly and forgets it when the tool is dropped: the tools of every past
        # refresh of an upstream must not stay alive for it (a Tool holds its schemas, and its
        # fields are not hashable, hence the object's id as key).
        self._selecting: dict[int, tuple[weakref.ref[Tool], tuple[int, ...]]] = {}

    @classmethod
    def from_sections(cls, sections: Iterable[PolicySpec | None]) -> ToolPolicy:
        """One policy from the ``policy:`` sections of the catalogue files, in their order;
        ``ValueError`` when two files declare different defaults."""
        rules: list[PolicyRuleSpec] = []
        defaults: set[str] = set()
        for section in sections:
            if section is None:
                continue
            rules += section.rules
            if section.default is not None:
                defaults.add(section.default)
        if len(defaults) > 1:
            raise ValueError("tool policy: the catalogue files declare different defaults")
        if len(rules) > MAX_RULES:
            raise ValueError(f"tool policy: more than {MAX_RULES} rules")
        default: Effect | None = "allow" if defaults == {"allow"} else None
        if defaults == {"deny"}:
            default = "deny"
        return cls(rules, default)

    @property
    def configured(self) -> bool:
        """Whether any rule or default was declared (else everything is allowed)."""
        return bool(self.rules) or self.default == "deny"

    def decide(self, subject: Subject, tool: Tool, action: Action) -> Decision:
        """Whether ``subject`` may ``action`` ``tool``, which rule decided, and why."""
        index = self._deciding_rule(subject, tool, action)
        if index is not None:
            rule = self.rules[index]
            verb = "allows" if rule.effect == "allow" else "denies"
            reason = f"rule {index} {verb} {action} of {tool.name!r} to {_who(subject)}"
            return Decision(rule.effect == "allow", index, reason)
        if not self.configured:
            return Decision(True, None, "no tool policy is configured: everything is allowed")
        verb = "allows" if self.default == "allow" else "denies"
        reason = f"no rule matches {action} of {tool.name!r} by {_who(subject)}: the default {verb}"
        return Decision(self.default == "allow", None, reason)

    def _deciding_rule(self, subject: Subject, tool: Tool, action: Action) -> int | None:
        for index in self._rules_selecting(tool):
            rule = self.rules[index]
            if action in rule.actions and _subject_matches(rule.subjects, subject):
                return index
        return None

    def _rules_selecting(self, tool: Tool) -> tuple[int, ...]:
        key = id(tool)
        known = self._selecting.get(key)
        if known is not None and known[0]() is tool:
            return known[1]
        found = tuple(i for i, rule in enumerate(self.rules) if _tool_matches(rule.tools, tool))
        memory = self._selecting

        def forget(reference: weakref.ref[Tool]) -> None:
            # Called as the tool is freed, before its id can be given to another object; the
            # entry is dropped only if it is still this tool's.
            entry = memory.get(key)
            if entry is not None and entry[0] is reference:
                del memory[key]

        self._selecting[key] = (weakref.ref(tool, forget), found)
        return found

    def listed_by_everyone(self, tool: Tool) -> bool:
        """Whether every user, whoever they are and whatever their roles, may list ``tool``: a
        rule allowing everyone (``*``) decides before any rule that denies someone the listing
        (or the default allows). Such a tool may be named where anyone can read it (the
        metrics, the counts of ``GET /`` and ``/health``); another tool is hidden from
        someone."""
        if not self.configured:
            return True
        for index in self._rules_selecting(tool):
            rule = self.rules[index]
            if "list" not in rule.actions:
                continue
            if rule.effect == "deny":
                return False
            if "*" in rule.subjects:
                return True
        return self.default == "allow"

    def allows(self, subject: Subject, tool: Tool, action: Action) -> bool:
        """Whether ``subject`` may ``action`` ``tool`` (cheap with no policy configured)."""
        if not self.configured:
            return True
        index = self._deciding_rule(subject, tool, action)  # no reason worded: listings ask often
        effect = self.default if index is None else self.rules[index].effect
        return effect == "allow"


def _who(subject: Subject) -> str:
    roles = f" (roles: {', '.join(sorted(subject.roles))})" if subject.roles else ""
    return f"user {subject.user_id!r}{roles}"


def _subject_matches(subjects: list[str], subject: Subject) -> bool:
    for entry in subjects:
        if entry == "*":
            return True
        kind, _, value = entry.partition(":")
        if (kind == "user" and value == subject.user_id) or (
            kind == "role" and value in subject.roles
        ):
            return True
    return False


def _tool_matches(selectors: list[str], tool: Tool) -> bool:
    for selector in selectors:
        kind, sep, value = selector.partition(":")
        if not sep:
            if glob_matches(selector, tool.name):
                return True
        elif kind == "tag":
            if any(glob_matches(value, tag) for tag in tool.tags):
                return True
        elif tool.upstream_origin is not None:
            server, _, name = value.partition("/")
            origin_server, origin_name = tool.upstream_origin
            if glob_matches(server, origin_server) and glob_matches(name, origin_name):
                return True
    return False


@dataclass(frozen=True, slots=True)
class CallRefusal:
    """Why a call is refused. ``hidden``: the caller may neither list nor call the tool, so the
    call is answered as if no such tool existed (an unknown name and a hidden one look alike)."""

    hidden: bool
    detail: str

    def rejection(self) -> tuple[str, str, None, int]:
        """The chain's rejection of a call refused outright: 403 ``TOOL_FORBIDDEN``."""
        return ProblemCode.TOOL_FORBIDDEN, self.detail, None, 403


def hidden_from(policy: ToolPolicy, subject: Subject, tool: Tool) -> bool:
    """Whether ``tool`` is hidden from ``subject``: they may neither list nor call it, so every
    answer must look as if it did not exist."""
    return not policy.allows(subject, tool, "call") and not policy.allows(subject, tool, "list")


def call_refusal(policy: ToolPolicy, subject: Subject, tools: Iterable[Tool]) -> CallRefusal | None:
    """Why ``subject`` may not call, or ``None`` when it may. ``tools`` are the tool the call
    names and, for an alias tool, the canonical tool it runs: both must be allowed, so that a
    rule about a tool cannot be walked around through its alias."""
    named = tuple(tools)
    for tool in named:
        if hidden_from(policy, subject, tool):
            # The caller is told no such tool exists; the operators' log says why.
            extra = {"user_id": subject.user_id, "tool": tool.name}
            log.info("the tool policy hid a tool from a call", extra=extra)
            return CallRefusal(True, f"the policy hides {tool.name!r}")
    for tool in named:
        decision = policy.decide(subject, tool, "call")
        if not decision.allowed:
            return CallRefusal(False, f"You may not call {tool.name!r}: {decision.reason}.")
    return None


def police_call(
    policy: ToolPolicy,
    user_id: str,
    roles: frozenset[str],
    alias: RegisteredAlias | None,
    registered: RegisteredTool | None,
) -> CallRefusal | None:
    """Why the chain refuses a call of ``registered`` (through ``alias``, if any) by ``user_id``
    with ``roles``; ``None`` when it may run (an unknown tool is the chain's own refusal). The
    chain asks before the tool's rate limit, whose 429 would tell a hidden tool from a missing
    one."""
    if registered is None or not policy.configured:
        return None
    tools = (alias.view, registered.tool) if alias else (registered.tool,)
    return call_refusal(policy, Subject(user_id, roles), tools)


def subject_of(principal: Principal) -> Subject:
    """The policy's subject for an authenticated caller (its own roles)."""
    return Subject(principal.user_id, principal.roles)


def listable(
    policy: ToolPolicy, registry: ToolRegistry, subject: Subject, tools: Iterable[Tool]
) -> list[Tool]:
    """The ``tools`` of ``registry`` that ``subject`` may list: an alias tool only when its
    canonical tool may be listed too (as a call needs both)."""
    if not policy.configured:
        return list(tools)
    shown = []
    for tool in tools:
        alias = registry.alias(tool.name)
        canonical = registry.resolve(alias.alias.canonical) if alias else None
        if policy.allows(subject, tool, "list") and (
            canonical is None or policy.allows(subject, canonical.tool, "list")
        ):
            shown.append(tool)
    return shown


def listed_by_everyone(policy: ToolPolicy, registry: ToolRegistry, tool: Tool) -> bool:
    """Whether every user may list ``tool`` of ``registry`` (an alias tool: and its canonical
    tool), so that its name and its existence are no secret from anyone."""
    if not policy.configured:
        return True
    alias = registry.alias(tool.name)
    canonical = registry.resolve(alias.alias.canonical) if alias else None
    return policy.listed_by_everyone(tool) and (
        canonical is None or policy.listed_by_everyone(canonical.tool)
    )


def public_tool_count(policy: ToolPolicy, registry: ToolRegistry) -> int:
    """How many tools the unauthenticated ``GET /`` and ``/health`` report: every registered
    tool without a policy (as before it existed); with one, the catalogue tools every user may
    list, so that the number tells nobody that tools hidden from them exist."""
    if not policy.configured:
        return len(registry)
    return sum(1 for tool in registry.tools() if listed_by_everyone(policy, registry, tool))
