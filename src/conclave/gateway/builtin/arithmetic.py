"""``evaluate_expression``: safe arithmetic over numbers, parsed with :mod:`ast`, never ``eval``.

Cost is bounded before it is paid: the size of every integer an operation would produce is worked
out from its operands' bit lengths first (``a ** b`` has about ``b * log2(a)`` bits, ``a * b`` at
most ``bits(a) + bits(b)``), and an operation whose result would exceed :data:`MAX_INTEGER_BITS`
is refused with 422 ``RESULT_TOO_LARGE`` without being computed. Float operations are cheap (they
overflow instead of growing). The tool runs in a worker process (``cpu_executor``), so even work
within the bounds cannot hold the gateway's event loop, and its time-out stops it.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from conclave.gateway.tools import RuleOutcome, Tool, ToolContext, ToolExecutionError
from conclave.platform.problem_types import ProblemCode

MAX_INTEGER_BITS = 100_000
"""Largest integer, intermediate or final, an expression may produce (30,103 decimal digits)."""
MAX_NODES = 500
"""Most syntax nodes (numbers, operators, calls) in one expression."""
_INT64 = 2**63
_DECIMAL_BLOCK_DIGITS = 4000  # below Python's 4,300-digit guard on int <-> str conversion
_DECIMAL_BLOCK = 10**_DECIMAL_BLOCK_DIGITS

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "log": math.log,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "floor": math.floor,
    "ceil": math.ceil,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}


def _fail(message: str) -> ToolExecutionError:
    return ToolExecutionError(message, code=ProblemCode.INVALID_EXPRESSION)


def _too_large(bits: float) -> ToolExecutionError:
    digits = "an unbounded number of" if math.isinf(bits) else f"about {bits * math.log10(2):,.0f}"
    return ToolExecutionError(
        f"the expression would produce an integer of {digits} digits; the limit is "
        f"{MAX_INTEGER_BITS:,} bits ({MAX_INTEGER_BITS * math.log10(2):,.0f} digits)",
        code=ProblemCode.RESULT_TOO_LARGE,
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _result_bits(op: ast.operator, left: Any, right: Any) -> float:
    """An upper bound of the bit length of ``left op right`` when both are integers (0 when the
    result is a float or cannot grow)."""
    if not (_is_int(left) and _is_int(right)):
        return 0
    base: int = left
    other: int = right
    if isinstance(op, ast.Add | ast.Sub):
        return max(base.bit_length(), other.bit_length()) + 1
    if isinstance(op, ast.Mult):
        return base.bit_length() + other.bit_length()
    if isinstance(op, ast.Pow) and other > 0 and abs(base) > 1:
        if other.bit_length() > 64:
            return math.inf
        return other * math.log2(abs(base)) + 1
    return 0  # division, modulo and negative powers never grow an integer


def _apply(name: str, arguments: list[Any]) -> Any:
    if name == "round" and len(arguments) == 2 and _is_int(arguments[1]) and arguments[1] < 0:
        # Rounding an integer to -n digits computes 10 ** n first.
        bits = -arguments[1] * math.log2(10) if arguments[1] > -(2**64) else math.inf
        if bits > MAX_INTEGER_BITS:
            raise _too_large(bits)
    return _FUNCTIONS[name](*arguments)


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        bits = _result_bits(node.op, left, right)
        if bits > MAX_INTEGER_BITS:
            raise _too_large(bits)
        value = _BINARY[type(node.op)](left, right)
        if isinstance(value, complex):  # (-8) ** 0.5: refused at once, not carried further
            raise _fail("result is not a real number")
        return value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _apply(node.func.id, [_evaluate(arg) for arg in node.args])
    raise _fail(f"unsupported syntax: {type(node).__name__}")


def _decimal(value: int) -> str:
    # str() refuses more than 4,300 digits (a guard against its quadratic cost); the value is
    # already bounded, so it is converted in blocks below that limit.
    sign, value = ("-" if value < 0 else ""), abs(value)
    blocks = []
    while value >= _DECIMAL_BLOCK:
        value, low = divmod(value, _DECIMAL_BLOCK)
        blocks.append(f"{low:0{_DECIMAL_BLOCK_DIGITS}d}")
    blocks.append(str(value))
    return sign + "".join(reversed(blocks))


def evaluate(args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    """The tool's function (run in a worker process). Integers beyond 64 bits are returned as
    their decimal text, which no JSON client can misread."""
    expression = args["expression"]
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise _fail(f"not an arithmetic expression: {exc.msg}") from exc
    except (RecursionError, MemoryError) as exc:
        raise _fail("the expression nests too deeply") from exc
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise _fail(f"expression has more than {MAX_NODES} parts")
    try:
        value = _evaluate(tree)
    except ZeroDivisionError as exc:
        raise _fail("division by zero") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        raise _fail(f"cannot evaluate: {exc}") from exc
    if _is_int(value) and not -_INT64 <= value < _INT64:
        value = _decimal(value)
    return {"expression": expression, "value": value}


def _flag_inexact(_args: Mapping[str, Any], result: Any) -> RuleOutcome | None:
    value = result["value"]
    if isinstance(value, float) and not math.isfinite(value):
        # JSON has no infinity or NaN: report null and say why.
        return RuleOutcome({**result, "value": None}, (f"result is {value}, reported as null",))
    if isinstance(value, str):
        digits = len(value.lstrip("-"))
        return RuleOutcome(
            result, (f"integer of {digits} digits exceeds 64 bits: returned as text",)
        )
    if isinstance(value, int) and abs(value) > 2**53:
        return RuleOutcome(result, ("integer exceeds 2^53: JSON clients may lose precision",))
    return None


EVALUATE_EXPRESSION = Tool(
    name="evaluate_expression",
    title="Evaluate arithmetic",
    description=(
        "Evaluate an arithmetic expression: numbers, + - * / // % **, parentheses, pi, e and "
        "abs round min max sqrt log exp sin cos tan floor ceil. Integers beyond 64 bits are "
        "returned as decimal text, up to 30,103 digits."
    ),
    cpu_executor=evaluate,
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string", "minLength": 1, "maxLength": 1000}},
        "required": ["expression"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {
            "expression": {"type": "string"},
            "value": {
                "type": ["number", "string", "null"],
                "description": "The value; an integer beyond 64 bits as its decimal text.",
            },
        },
        "required": ["expression", "value"],
    },
    annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
    tags=("builtin", "math"),
    rules=(_flag_inexact,),
    timeout_seconds=5,
)
