"""An upstream's listing turned into gateway tools, and their calls' outcomes into the chain's.

Each listed tool becomes a :class:`~conclave.gateway.tools.Tool` whose executor sends
``tools/call`` to the upstream, so it runs through the whole chain like any other tool: argument
validation against the upstream's own input schema, rate limits, idempotency, time-out, audit row
and event, output schema, result size. What the upstream sends is untrusted data:

- a tool whose name is longer than :data:`MAX_TOOL_NAME_LENGTH`, whose name, schemas or
  annotations hold a value no store or answer can carry (a lone surrogate, NUL, a non-finite
  number, an integer beyond 64 bits), whose schemas are larger than
  :data:`MAX_SCHEMA_BYTES`, nest deeper than the registry allows or do not compile is skipped
  and noted (``GET /upstreams``), the others are served;
- descriptions and titles are cut and have such characters escaped.

Outcomes: ``structuredContent`` is the result when the upstream gives it (checked by the chain
against the tool's ``outputSchema``: a mismatch is an audited ``OUTPUT_INVALID``, never passed
on; a tool with an output schema that gives none fails the same way); otherwise a single text
block is the result as a string, and any other content is the list of content blocks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from conclave.gateway.progress import ProgressReporter
from conclave.gateway.registry import MAX_SCHEMA_DEPTH, RegisteredTool, ToolRegistry
from conclave.gateway.tools import Executor, Tool, ToolContext, ToolExecutionError
from conclave.gateway.upstreams.access import Presented, UpstreamAccess
from conclave.gateway.upstreams.aliases import upstream_alias
from conclave.gateway.upstreams.connection import Upstream
from conclave.gateway.upstreams.redaction import Scrubber
from conclave.gateway.upstreams.session_answers import SSE_EVENT_TOO_LARGE, connection_lost
from conclave.gateway.upstreams.upstream_errors import UpstreamDown
from conclave.gateway.upstreams.user_sessions import CredentialChanged, CredentialRefused
from conclave.gateway.validation import depth_exceeds
from conclave.platform.egress_mcp import ANSWER_TOO_LARGE
from conclave.platform.inputs import escape_text, find_unsafe
from conclave.platform.problem_types import ProblemCode
from conclave.platform.ratelimit import Rate

MAX_SCHEMA_BYTES = 262_144
"""Largest input or output schema of an upstream tool, in bytes of JSON."""
MAX_TOOL_NAME_LENGTH = 128
"""Longest name of an upstream tool, as MCP bounds tool names (and the catalogue, its own): the
tool policy's ``upstream:<server>/<tool>`` globs are matched against it."""
_MAX_DESCRIPTION = 4000
_MAX_TOOL_ERROR = 500
# How many times a call reads the user's credential when it changes under it.
_CREDENTIAL_READS = 3


def _error(message: str, code: str, status: int) -> ToolExecutionError:
    return ToolExecutionError(message, code=code, status=status)


def _rpc_error(server: str, exc: MCPError, scrubber: Scrubber) -> BaseException:
    code, text = exc.error.code, scrubber.cut(exc.error.message, 300)
    # Our own cap (an answer's body, a stdio line) or the SDK's on one event of a stream.
    if ANSWER_TOO_LARGE in text or SSE_EVENT_TOO_LARGE in text:
        return _error(
            f"Upstream {server!r} answered more than the gateway accepts.",
            ProblemCode.RESULT_TOO_LARGE,
            422,
        )
    if code == types.REQUEST_TIMEOUT:
        return TimeoutError()  # the chain's TOOL_TIMEOUT, recorded as a time-out
    if connection_lost(exc):
        message = f"The connection to upstream {server!r} ended during the call."
        return _error(message, ProblemCode.UPSTREAM_CONNECTION_LOST, 502)
    if code == types.INVALID_PARAMS:
        message = f"Upstream {server!r} refused the call: {text}"
        return _error(message, ProblemCode.UPSTREAM_REJECTED, 422)
    message = f"Upstream {server!r} answered JSON-RPC error {code}: {text}"
    return _error(message, ProblemCode.UPSTREAM_FAILED, 502)


def _tool_error_text(result: types.CallToolResult, scrubber: Scrubber) -> str:
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    return scrubber.cut(" ".join(texts), _MAX_TOOL_ERROR) or "(no text)"


def result_value(result: types.CallToolResult) -> Any:
    """What the chain checks, stores and answers for a successful upstream result."""
    if result.structured_content is not None:
        return result.structured_content
    content = result.content
    if len(content) == 1 and isinstance(content[0], types.TextContent):
        return content[0].text
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in content]


def upstream_executor(upstream: Upstream, name: str, access: UpstreamAccess | None) -> Executor:
    """The executor of upstream tool ``name``: one ``tools/call`` presenting the credential
    ``access`` chooses (none without one), failures as stable codes."""

    async def execute(args: dict[str, Any], ctx: ToolContext) -> Any:
        ctx.upstream_credential = "none"
        for _ in range(_CREDENTIAL_READS):
            presented = Presented("none") if access is None else await access.presented(ctx.user_id)
            ctx.upstream_credential = presented.kind
            # Everything the call presents: the entry's static headers, the service credential,
            # the user's credential (whichever is presented, the others cost nothing).
            scrubber = upstream.scrubber.extended(presented.secret)
            progress = _scrubbed(ctx.progress, scrubber)
            try:
                result = await _call(
                    upstream, access, presented, name, args, ctx, scrubber, progress
                )
            except CredentialChanged:
                continue  # replaced or deleted since it was read: read it again
            except ToolExecutionError as exc:
                raise _error(scrubber.text(exc.message), exc.code, exc.status) from None
            return scrubber.value(result)
        message = f"Your credential for upstream {upstream.spec.name!r} kept changing; try again."
        raise _error(message, ProblemCode.UPSTREAM_UNAVAILABLE, 503)

    return execute


def _scrubbed(report: ProgressReporter | None, scrubber: Scrubber) -> ProgressReporter | None:
    """``report`` with what the call presents scrubbed from each message, as from results: an
    upstream that echoes its request's headers in its progress must not hand the caller a
    credential (the service's, which callers never see) on the way."""
    if report is None:
        return report

    def scrubbed(progress: float, total: float | None, message: str | None) -> None:
        # The whole message, before the relay cuts it: a cut could leave part of the secret.
        report(progress, total, None if message is None else scrubber.text(message))

    return scrubbed


async def _call(
    upstream: Upstream,
    access: UpstreamAccess | None,
    presented: Presented,
    name: str,
    args: dict[str, Any],
    ctx: ToolContext,
    scrubber: Scrubber,
    progress: ProgressReporter | None,
) -> Any:
    server = upstream.spec.name
    try:
        if presented.kind == "user":
            assert access is not None and access.sessions is not None
            assert presented.secret is not None and presented.header_value is not None
            result = await access.sessions.call(
                ctx.user_id,
                presented.secret,
                presented.header_value,
                presented.generation,
                name,
                args,
                progress,
            )
        else:
            result = await upstream.call(name, args, progress)
    except CredentialRefused as exc:
        message = f"Upstream {server!r} refused your credential; replace it."
        raise _error(message, ProblemCode.UPSTREAM_CREDENTIAL_REJECTED, 403) from exc
    except UpstreamDown as exc:
        raise _error(str(exc), ProblemCode.UPSTREAM_UNAVAILABLE, 503) from exc
    except MCPError as exc:
        raise _rpc_error(server, exc, scrubber) from exc
    except ValidationError as exc:
        message = f"Upstream {server!r} answered with something that is not a tool result."
        raise _error(message, ProblemCode.UPSTREAM_FAILED, 502) from exc
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream) as exc:
        message = f"The connection to upstream {server!r} ended during the call."
        raise _error(message, ProblemCode.UPSTREAM_CONNECTION_LOST, 502) from exc
    except (httpx2.HTTPError, OSError) as exc:
        message = f"Upstream {server!r} could not be reached."
        raise _error(message, ProblemCode.UPSTREAM_CONNECTION_LOST, 502) from exc
    if result.is_error:
        text = f"Upstream tool failed: {_tool_error_text(result, scrubber)}"
        raise _error(text, ProblemCode.UPSTREAM_TOOL_ERROR, 422)
    return result_value(result)


def _refusal(tool: types.Tool) -> str | None:
    """Why a listed tool cannot be served, or ``None``."""
    # Python mode: a NaN stays a NaN (JSON mode would quietly write it as null).
    if len(tool.name) > MAX_TOOL_NAME_LENGTH:
        return f"its name is longer than {MAX_TOOL_NAME_LENGTH} characters"
    described = tool.model_dump(by_alias=True, exclude_none=True)
    unsafe = find_unsafe(described)
    if unsafe is not None:
        return f"it holds an unsafe value at {unsafe.field or '/'} ({unsafe.message})"
    for part, schema in (("input", tool.input_schema), ("output", tool.output_schema)):
        if schema is not None and depth_exceeds(schema, MAX_SCHEMA_DEPTH):
            return f"its {part} schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
        if schema is not None and len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
            return f"its {part} schema is larger than {MAX_SCHEMA_BYTES} bytes"
    return None


def build_entries(
    upstream: Upstream,
    listing: list[types.Tool],
    taken: Callable[[str], bool],
    access: UpstreamAccess | None = None,
) -> tuple[list[RegisteredTool], list[str]]:
    """Checked, compiled tools of ``listing`` and notes on the ones skipped. Synchronous and
    free of shared state: it runs in a thread, its cost being proportional to what the upstream
    sent."""
    spec = upstream.spec
    entries: list[RegisteredTool] = []
    notes: list[str] = []
    aliases: set[str] = set()
    for listed in listing:
        shown = escape_text(listed.name[:80])
        try:
            refusal = _refusal(listed)
        except (ValueError, TypeError, RecursionError) as exc:
            refusal = f"it cannot be read ({type(exc).__name__})"
        if refusal is None:
            try:
                alias = upstream_alias(spec.name, listed.name, lambda n: taken(n) or n in aliases)
                annotations = (
                    listed.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
                    if listed.annotations
                    else None
                )
                tool = Tool(
                    name=alias,
                    title=escape_text(listed.title[:200]) if listed.title else None,
                    description=escape_text((listed.description or "")[:_MAX_DESCRIPTION]),
                    executor=upstream_executor(upstream, listed.name, access),
                    parameters=listed.input_schema,
                    output_schema=listed.output_schema,
                    annotations=annotations or None,
                    tags=("upstream", f"upstream:{spec.name}", *spec.tags),
                    # The SDK's read time-out fires first and is answered as a time-out too.
                    timeout_seconds=spec.timeout_seconds + 1.0,
                    max_concurrency=spec.max_concurrency,
                    rate_limit=Rate.parse(spec.rate_limit),
                    audit_read_only=None if spec.trust_read_only_hint else False,
                    upstream_origin=(spec.name, listed.name),
                )
                entries.append(ToolRegistry.prepare(tool))
                aliases.add(alias)
                continue
            except (ValueError, RecursionError) as exc:
                refusal = str(exc)[:300]
        notes.append(f"tool {shown!r} skipped: {escape_text(refusal)}")
    return entries, notes


async def entries_off_loop(
    upstream: Upstream,
    listing: list[types.Tool],
    taken: frozenset[str],
    access: UpstreamAccess | None = None,
) -> tuple[list[RegisteredTool], list[str]]:
    """:func:`build_entries` in a worker thread (``taken``: a snapshot of the names in use)."""
    return await asyncio.to_thread(build_entries, upstream, listing, taken.__contains__, access)
