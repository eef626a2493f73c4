"""An alias's arguments mapped onto its canonical tool, and the shape of a call's refusal."""

from __future__ import annotations

from typing import Any

from conclave.gateway.finance import RewriteError
from conclave.gateway.registry import RegisteredAlias, RegisteredTool
from conclave.gateway.validation import schema_errors
from conclave.platform.problem_types import ProblemCode

Rejection = tuple[str, str, list[dict[str, str]] | None, int]
"""(code, detail, field errors, HTTP status) of a call refused before it runs."""


def rewrite_alias_args(
    alias: RegisteredAlias, registered: RegisteredTool, args: dict[str, Any]
) -> tuple[dict[str, Any] | None, Rejection | None]:
    """Map alias arguments onto the canonical tool, checking the result against its schema."""
    try:
        canonical_args = alias.alias.rewrite(dict(args))
    except RewriteError as exc:
        errors = [{"field": "/", "message": str(exc), "rule": "rewrite"}]
        return None, (
            ProblemCode.VALIDATION_FAILED,
            f"Arguments cannot be mapped: {exc}.",
            errors,
            422,
        )
    errors = schema_errors(registered.arguments, canonical_args)
    if errors:
        detail = f"Rewritten arguments do not fit {registered.tool.name!r}."
        return None, (ProblemCode.VALIDATION_FAILED, detail, errors, 422)
    return canonical_args, None
