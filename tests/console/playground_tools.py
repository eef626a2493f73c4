"""A plug-in tool whose schema has every shape the playground's form handles (loaded by the
gateway of the tools tests through ``tool_modules``); it answers the arguments it received."""

from __future__ import annotations

from typing import Any

from conclave.gateway.tools import Tool, ToolContext

HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>"


async def _received(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"received": args}


FORM_SHAPES = Tool(
    name="form_shapes",
    title="Form shapes",
    description=f"Answers its arguments. {HOSTILE}",
    executor=_received,
    parameters={
        "type": "object",
        "properties": {
            "label": {"type": "string", "maxLength": 40, "description": f"A label {HOSTILE}"},
            "colour": {"type": "string", "enum": ["red", "green", HOSTILE], "default": "green"},
            "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "multipleOf": 0.25},
            "big": {"type": "integer"},
            "maybe": {"type": ["null", "integer"]},
            "flag": {"type": "boolean"},
            "level": {"enum": [1, 2, 3]},
            "size": {
                "type": "object",
                "properties": {
                    "width": {"type": "integer", "minimum": 0},
                    "unit": {"type": "string", "enum": ["px", "em"]},
                },
                "required": ["width"],
                "additionalProperties": False,
            },
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
            HOSTILE: {"type": "string", "description": "A property named like markup."},
        },
        "required": ["label", "size"],
        "additionalProperties": False,
    },
    output_schema={"type": "object", "properties": {"received": {"type": "object"}}},
    tags=("test",),
)

WIDE = Tool(
    name="wide",
    description="More properties than a form shows.",
    executor=_received,
    parameters={
        "type": "object",
        "properties": {f"p{index}": {"type": "string"} for index in range(201)},
        "additionalProperties": False,
    },
    tags=("test",),
)

TOOLS = [FORM_SHAPES, WIDE]
