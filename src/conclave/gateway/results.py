"""What a tool's result must be before it is stored and answered: strict JSON, within a size cap.

The audit row, the caller's answer and any replay hold the same result, so a value one of them
cannot carry must be caught before any of them is written: otherwise the row commits and the
answer fails (a 500 for a call recorded ``succeeded``). Results come from plug-ins and remote
backends, so anything is possible: text with a lone surrogate (no UTF-8 encoding) or NUL
(refused by PostgreSQL), ``NaN``/``Infinity`` (not JSON), integers too long to write out, values
that are not JSON at all, and results large enough to bloat every audit row that stores them.

One C-speed encoding of the result answers almost all of it; NUL and integers beyond 64 bits (held
to the same rule as inputs, :mod:`conclave.platform.inputs`) are suspected from the text and
confirmed by a walk. Shared sub-objects are written out each time they appear,
which is what the cap must count (see the ``json_query`` tool's own budget).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from conclave.platform.inputs import find_unsafe
from conclave.platform.jsontext import json_encoder
from conclave.platform.problem_types import ProblemCode

# `same_errors`: a tool's result may contain itself (a plug-in's tree with a parent link), which
# must be refused as soon as it is met again.
_strict_text = json_encoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), same_errors=True
)
# What the encoded text shows of the values a walk must confirm: NUL, and integers of 19 digits
# or more (beyond 64 bits, as for inputs). Text holding the same characters is told apart by it.
_SUSPECT = re.compile(r"\\u0000|[0-9]{19}")


@dataclass(frozen=True)
class ResultProblem:
    """Why a result cannot be stored and answered, as the call's failure."""

    code: str
    message: str
    status: int


def result_problem(result: Any, max_bytes: int) -> ResultProblem | None:
    """The reason ``result`` cannot be stored and answered as it is, or ``None``."""
    try:
        text = _strict_text(result)
    except TypeError as exc:
        return _invalid(f"it is not JSON ({exc})")
    except ValueError as exc:
        if "float" in str(exc):
            return _invalid("it holds NaN or Infinity, which JSON cannot carry")
        if "Circular reference" in str(exc):
            return _invalid("it contains itself (a circular reference)")
        return _invalid("it holds an integer too long to write out")
    except RecursionError:
        return _invalid("it nests too deeply to write out")
    if text.isascii():
        size = len(text)
    else:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            return _invalid("it holds text that cannot be encoded as UTF-8 (a lone surrogate)")
    if size > max_bytes:
        return ResultProblem(
            ProblemCode.RESULT_TOO_LARGE,
            f"The tool ran, but its result ({size:,} bytes of JSON) exceeds the gateway's limit "
            f"of {max_bytes:,} bytes; it was neither stored nor returned.",
            422,
        )
    if _SUSPECT.search(text):
        finding = find_unsafe(result, ("result",))
        if finding is not None:
            return _invalid(f"{finding.field}: {finding.message}")
    return None


def _invalid(reason: str) -> ResultProblem:
    return ResultProblem(
        ProblemCode.OUTPUT_INVALID,
        f"The tool ran, but its result cannot be stored or returned: {reason.rstrip('.')}.",
        502,
    )
