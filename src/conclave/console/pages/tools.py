"""Tools: the gateway's catalogue with each schema shown as a table (``GET /tools?format=mcp``),
and a playground that builds a form from a tool's input schema and runs it through the governed
chain (``POST /execute``, as the signed-in user).

The playground converts the form strictly before anything is sent (:mod:`conclave.console.
schema_form`): a field it cannot read is shown next to the field and no call is made. Once sent,
the gateway decides: its outcome (status, orthodoxy, warnings, result) or its problem is shown,
with a link to the audit row the call left (a refused call leaves one too; its problem names it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse

from conclave.console.schema_form import (
    ToolForm,
    build_form,
    form_arguments,
    raw_arguments,
    schema_table,
)
from conclave.console.session import Session
from conclave.console.upstream import ServiceProblem, Services, problem_of
from conclave.console.web import (
    ServicesDep,
    SignedIn,
    checked_form,
    media_type_of,
    page,
    pretty_json,
)
from conclave.platform.errors import NotFound
from conclave.platform.inputs import escape_text
from conclave.platform.problem_types import ProblemCode, title_of

router = APIRouter(include_in_schema=False)

PAGE_ROWS = 1500
"""Most schema rows the Tools page shows, over all its tools."""

MAX_FORM_FIELDS = 1000
"""Fields read from one playground form (Starlette's own limit for a form)."""

_HINTS = {
    "readOnlyHint": "read-only",
    "destructiveHint": "destructive",
    "idempotentHint": "idempotent",
    "openWorldHint": "open world",
}

ToolName = Annotated[str, Path(min_length=1, max_length=256)]


@dataclass(frozen=True)
class ToolView:
    """One catalogue entry, ready for the page."""

    name: str
    title: str
    description: str
    hints: list[str]
    input_schema: Any
    output_schema: Any


def _view(entry: Any) -> ToolView | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return None
    annotations = entry.get("annotations")
    hints = [
        word
        for key, word in _HINTS.items()
        if isinstance(annotations, dict) and annotations.get(key) is True
    ]
    return ToolView(
        name=entry["name"],
        title=str(entry.get("title") or ""),
        description=str(entry.get("description") or ""),
        hints=hints,
        input_schema=entry.get("inputSchema") if isinstance(entry.get("inputSchema"), dict) else {},
        output_schema=entry.get("outputSchema"),
    )


async def _catalogue(services: Services, session: Session) -> list[ToolView]:
    found = await services.get("gateway", "/tools", session, params={"format": "mcp"})
    entries = found.get("tools") if isinstance(found, dict) else None
    views = (_view(entry) for entry in (entries if isinstance(entries, list) else []))
    return [view for view in views if view is not None]


async def _tool(services: Services, session: Session, name: str) -> ToolView:
    for view in await _catalogue(services, session):
        if view.name == name:
            return view
    raise NotFound(
        "The gateway's catalogue has no tool of this name (or it is unavailable here).",
        code=ProblemCode.UNKNOWN_TOOL,
    )


@router.get("/tools")
async def tools(request: Request, session: SignedIn, services: ServicesDep) -> HTMLResponse:
    """The catalogue, each tool's input and output schema as a table."""
    views = await _catalogue(services, session)
    # The page's tables share one budget of rows: a catalogue of many large schemas lists its
    # later tools by name, their tables on their own playground pages (a 2.4 MB catalogue made
    # an 11 MB page and held the event loop 1.6 s).
    room = PAGE_ROWS
    tables: dict[str, tuple[Any, Any]] = {}
    for view in views:
        if room <= 0:
            tables[view.name] = (None, None)
            continue
        shown = (schema_table(view.input_schema), _output_table(view.output_schema))
        room -= sum(len(table.rows) for table in shown if table is not None)
        tables[view.name] = shown
    return page(request, "tools.html", session, tools=views, tables=tables)


def _output_table(schema: Any) -> Any:
    return schema_table(schema) if isinstance(schema, dict) else None


@router.get("/tools/{name}")
async def playground(
    request: Request, name: ToolName, session: SignedIn, services: ServicesDep
) -> HTMLResponse:
    """The playground of one tool: a form made from its input schema."""
    tool = await _tool(services, session, name)
    return _playground(request, session, tool, build_form(tool.input_schema))


@router.post("/tools/{name}")
async def run(
    request: Request, name: ToolName, session: SignedIn, services: ServicesDep
) -> HTMLResponse:
    """Convert the form to arguments, run the tool through the gateway, show its outcome."""
    # The body is read first (the CSRF check parses the form from the same bytes), and only a
    # URL-encoded one: any other is refused by the check without being read.
    url_encoded = media_type_of(request) == "application/x-www-form-urlencoded"
    body = await request.body() if url_encoded else b""
    await checked_form(request, session)
    values = _fields_of(body)
    tool = await _tool(services, session, name)
    form = build_form(tool.input_schema)
    mode = "raw" if values.get("mode") == "raw" else "form"
    problems: dict[str, str] = {}
    if mode == "raw":
        raw_text = values.get("raw", "")
        try:
            arguments = raw_arguments(raw_text)
        except ValueError as exc:
            problems["raw"] = str(exc)
    else:
        conversion = form_arguments(form, values)
        arguments, problems = conversion.arguments, conversion.problems
        raw_text = pretty_json(arguments)  # bounded: indented only when small and shallow
    shown = {key: escape_text(value) for key, value in values.items()}
    if problems:
        return _playground(request, session, tool, form, shown, problems, mode,
                           escape_text(raw_text), status_code=422)  # fmt: skip
    outcome = await _execute(services, session, tool.name, arguments)
    return _playground(request, session, tool, form, shown, {}, mode, escape_text(raw_text),
                       outcome=outcome, status_code=outcome["http_status"])  # fmt: skip


def _fields_of(body: bytes) -> dict[str, str]:
    """A URL-encoded form's fields (:func:`checked_form` refused any other body) decoded
    faithfully: invalid UTF-8 (an encoded lone surrogate) becomes lone surrogates the conversion
    refuses, where Starlette's parser would have silently replaced it with U+FFFD."""
    fields: dict[str, str] = {}
    for part in body.split(b"&", MAX_FORM_FIELDS)[:MAX_FORM_FIELDS]:
        if not part:
            continue
        raw_name, _, raw_value = part.partition(b"=")
        fields[_decoded(raw_name)] = _decoded(raw_value)
    return fields


def _decoded(raw: bytes) -> str:
    return unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8", "surrogateescape")


async def _execute(
    services: Services, session: Session, tool: str, arguments: Any
) -> dict[str, Any]:
    """The gateway's outcome of one call, or its problem (a service that cannot be reached is
    a problem shown the same way)."""
    document = json.dumps({"tool": tool, "args": arguments}).encode()
    try:
        answer = await services.request("POST", "gateway", "/execute", session, content=document,
                                        headers={"Content-Type": "application/json"})  # fmt: skip
    except ServiceProblem as exc:
        return {"ok": False, "http_status": exc.status, "problem": exc, "conclave_id": None}
    try:
        body = answer.json()
    except ValueError:
        body = None
    if answer.is_success and not isinstance(body, dict):
        code = ProblemCode.UPSTREAM_ANSWER_INVALID
        detail = "The gateway answered something that is not a call's outcome."
        invalid = ServiceProblem("gateway", 502, title_of(code), detail, code)
        return {"ok": False, "http_status": 502, "problem": invalid, "conclave_id": None}
    body = body if isinstance(body, dict) else {}
    conclave_id = body.get("conclave_id")
    shown = {
        "ok": answer.is_success,
        "http_status": answer.status_code,
        "conclave_id": conclave_id if isinstance(conclave_id, str) else None,
        "orthodoxy_status": body.get("orthodoxy_status"),
        "problem": None if answer.is_success else problem_of("gateway", answer),
    }
    if answer.is_success:
        shown.update(
            status=body.get("status"),
            warnings=[str(w) for w in body.get("warnings") or [] if isinstance(w, str)],
            result=body.get("result"),
            duration_ms=body.get("duration_ms"),
        )
    return shown


def _playground(
    request: Request,
    session: Session,
    tool: ToolView,
    form: ToolForm,
    values: dict[str, str] | None = None,
    problems: dict[str, str] | None = None,
    mode: str = "form",
    raw_text: str = "{}",
    outcome: dict[str, Any] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    return page(
        request,
        "tool.html",
        session,
        status_code=status_code,
        tool=tool,
        form=form,
        table=schema_table(tool.input_schema),
        values=values or {},
        submitted=values is not None,
        problems=problems or {},
        mode=mode,
        raw_text=raw_text,
        outcome=outcome,
    )
