"""How a call that reached its tool ended: its result judged against the tool's output schema
and rules, or the failure that stopped it, before the chain times, records and answers it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from conclave.gateway.outcome import (
    BLESSED,
    FAILED,
    HERETICAL,
    PURIFIED,
    REJECTED,
    SUCCEEDED,
)
from conclave.gateway.registry import RegisteredTool
from conclave.gateway.results import result_problem
from conclave.gateway.tools import RuleViolation
from conclave.gateway.validation import schema_errors
from conclave.platform.problem_types import ProblemCode

log = logging.getLogger(__name__)

_SCHEMA_MISMATCH = "The tool's result does not match its output schema."


@dataclass(slots=True)
class Ending:
    """How a call that reached its tool ended, before it is timed, recorded and answered."""

    status: str
    orthodoxy: str
    http_status: int
    code: str | None = None
    message: str | None = None
    result: Any = None
    warnings: list[str] | None = None


def failed(
    http_status: int, code: str, message: str, *, status: str = FAILED, orthodoxy: str = BLESSED
) -> Ending:
    """The ending of a call that failed with ``code``."""
    return Ending(status, orthodoxy, http_status, code, message)


def judge_result(
    registered: RegisteredTool, args: Any, result: Any, max_result_bytes: int
) -> Ending:
    """How a call whose tool returned ``result`` ends: its output schema, then its rules, then
    whether what is left can be stored and answered."""
    if registered.output is not None and schema_errors(registered.output, result):
        return failed(502, ProblemCode.OUTPUT_INVALID, _SCHEMA_MISMATCH, orthodoxy=HERETICAL)
    checked = result
    warnings: list[str] = []
    try:
        for rule in registered.tool.rules:
            verdict = rule(args, result)
            if verdict is not None:
                result = verdict.result
                warnings.extend(verdict.warnings)
    except RuleViolation as exc:
        storable = result_problem(result, max_result_bytes) is None
        kept = result if storable else None
        return Ending(REJECTED, HERETICAL, 422, ProblemCode.RULE_VIOLATION, str(exc), result=kept)
    except Exception:
        log.exception("tool rule raised", extra={"tool": registered.tool.name})
        return failed(502, ProblemCode.TOOL_FAILED, "A rule of the tool failed unexpectedly.")
    if (
        result is not checked
        and registered.output is not None
        and schema_errors(registered.output, result)
    ):  # a rule's correction must still be what the tool declares (MCP clients check it)
        return failed(502, ProblemCode.OUTPUT_INVALID, _SCHEMA_MISMATCH, orthodoxy=HERETICAL)
    # After the rules (they may correct a value): what is stored, answered and replayed.
    problem = result_problem(result, max_result_bytes)
    if problem is not None:
        return failed(problem.status, problem.code, problem.message, orthodoxy=HERETICAL)
    orthodoxy = PURIFIED if warnings else BLESSED
    return Ending(SUCCEEDED, orthodoxy, 200, result=result, warnings=warnings)
