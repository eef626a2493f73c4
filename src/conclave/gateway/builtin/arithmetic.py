"""``evaluate_expression``: safe arithmetic over numbers, parsed with :mod:`ast`, never ``eval``."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from conclave.gateway.tools import RuleOutcome, Tool, ToolContext, ToolExecutionError

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
    "abs": abs, "round": round, "min": min, "max": max, "sqrt": math.sqrt, "log": math.log,
    "exp": math.exp, "sin": math.sin, "cos": math.cos, "tan": math.tan, "floor": math.floor,
    "ceil": math.ceil,
}  # fmt: skip
_CONSTANTS = {"pi": math.pi, "e": math.e}
# Bounds that keep one expression cheap: big integer powers are the classic way to burn CPU.
_MAX_EXPONENT = 10_000
_MAX_MAGNITUDE_BITS = 100_000
_MAX_NODES = 500


def _fail(message: str) -> ToolExecutionError:
    return ToolExecutionError(message, code="INVALID_EXPRESSION")


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
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise _fail(f"exponent larger than {_MAX_EXPONENT}")
        value = _BINARY[type(node.op)](left, right)
        if isinstance(value, int) and value.bit_length() > _MAX_MAGNITUDE_BITS:
            raise _fail("result too large")
        return value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _FUNCTIONS[node.func.id](*(_evaluate(arg) for arg in node.args))
    raise _fail(f"unsupported syntax: {type(node).__name__}")


async def _evaluate_expression(args: dict[str, Any], _ctx: ToolContext) -> dict[str, Any]:
    expression = args["expression"]
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise _fail(f"not an arithmetic expression: {exc.msg}") from exc
    if sum(1 for _ in ast.walk(tree)) > _MAX_NODES:
        raise _fail(f"expression has more than {_MAX_NODES} parts")
    try:
        value = _evaluate(tree)
    except ZeroDivisionError as exc:
        raise _fail("division by zero") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        raise _fail(f"cannot evaluate: {exc}") from exc
    if isinstance(value, complex):
        raise _fail("result is not a real number")
    return {"expression": expression, "value": value}


def _flag_non_finite_and_inexact(_args: Mapping[str, Any], result: Any) -> RuleOutcome | None:
    value = result["value"]
    if isinstance(value, float) and not math.isfinite(value):
        # JSON has no infinity or NaN: report null and say why.
        return RuleOutcome({**result, "value": None}, (f"result is {value}, reported as null",))
    if isinstance(value, int) and abs(value) > 2**53:
        return RuleOutcome(result, ("integer exceeds 2^53: JSON clients may lose precision",))
    return None


EVALUATE_EXPRESSION = Tool(
    name="evaluate_expression",
    title="Evaluate arithmetic",
    description=(
        "Evaluate an arithmetic expression: numbers, + - * / // % **, parentheses, pi, e and "
        "abs round min max sqrt log exp sin cos tan floor ceil."
    ),
    executor=_evaluate_expression,
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string", "minLength": 1, "maxLength": 1000}},
        "required": ["expression"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "properties": {"expression": {"type": "string"}, "value": {"type": ["number", "null"]}},
        "required": ["expression", "value"],
    },
    annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
    tags=("builtin", "math"),
    rules=(_flag_non_finite_and_inexact,),
    timeout_seconds=5,
)
