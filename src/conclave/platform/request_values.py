"""Every value an ordinary route reads from a request, refused when no store, bus or response can
carry it (:mod:`conclave.platform.inputs`): 422 ``UNSAFE_INPUT`` naming the field.

:func:`refuse_unsafe_values` is an app-wide dependency (``create_service_app`` installs it), so
every route of every service gets it without code of its own, before its other dependencies
(authentication, the service's own) and before the schema is checked. It looks at

* path parameters: the server percent-decodes the path, turning ``%00`` into NUL and invalid
  UTF-8 (``%ED%A0%80``, the encoding of a lone surrogate) silently into U+FFFD; the raw path tells
  them apart from text the client really sent;
* the query string, for the same two reasons (Starlette decodes it leniently too);
* header values: servers refuse NUL (and Starlette decodes the bytes they pass as Latin-1, which
  cannot give a lone surrogate), but an app served in-process gets whatever its client sends;
* the JSON body FastAPI decoded (``json.loads`` accepts lone surrogates, ``NaN``, ``1e309`` and
  integers of any size), and the fields of a form body.

The fast-lane routes (gateway ``POST /execute``, graph ``POST /dispatch``, the edge's uploads) do
not go through FastAPI's dependencies: the lane checks their path, query and headers with
:func:`refuse_unsafe_request_line`, and they read their body with
:func:`conclave.platform.bodies.read_model` (the edge's multipart reader), which refuses the same
values. Every check costs a scan of bytes that are already in memory, and
the slow paths (splitting the query, matching the path again) run only for a request that holds
something to refuse.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from fastapi import Request
from fastapi.params import Form
from starlette.types import Scope

from conclave.platform.bodies import is_json_media_type
from conclave.platform.inputs import (
    UnsafeInput,
    UnsafeValue,
    escape_text,
    find_unsafe,
    text_problem,
)


async def refuse_unsafe_values(request: Request) -> None:
    """Raise :class:`~conclave.platform.inputs.UnsafeInput` (422 ``UNSAFE_INPUT``) when a path
    parameter, a query parameter, a header or the body of ``request`` holds an unsafe value."""
    refuse_unsafe_request_line(request.scope)
    finding = await _in_body(request)
    if finding is not None:
        raise UnsafeInput(finding)


def refuse_unsafe_request_line(scope: Scope) -> None:
    """:func:`refuse_unsafe_values` without the body: the path, the query and the headers (what a
    fast lane checks before its route, which reads and checks its body itself)."""
    finding = _in_path(scope) or _in_query(scope) or _in_headers(scope)
    if finding is not None:
        raise UnsafeInput(finding)


def _decoded(raw: bytes) -> str:
    # Invalid UTF-8 becomes lone surrogates (``surrogateescape``), which the check then finds.
    return unquote_to_bytes(raw).decode("utf-8", "surrogateescape")


def _needs_decoding(raw: bytes) -> bool:
    return b"%" in raw or b"\x00" in raw or not raw.isascii()


def _in_path(scope: Scope) -> UnsafeValue | None:
    params = scope.get("path_params")
    if params:
        finding = find_unsafe(params, ("path",))
        if finding is not None:
            return finding
    raw = scope.get("raw_path")
    if not raw or not _needs_decoding(raw):
        return None
    path = _decoded(raw)
    kind = text_problem(path)
    if kind is None:
        return None
    # Match the route again on the faithfully decoded path, to name the parameter.
    root_path = scope.get("root_path", "")
    if root_path and path.startswith(root_path):
        path = path[len(root_path) :]
    regex = getattr(scope.get("route"), "path_regex", None)
    match = regex.match(path) if regex is not None else None
    if match is not None:
        finding = find_unsafe(match.groupdict(), ("path",))
        if finding is not None:
            return finding
    return UnsafeValue(("path",), kind)


def _in_query(scope: Scope) -> UnsafeValue | None:
    raw: bytes = scope.get("query_string", b"")
    if not raw or not _needs_decoding(raw):
        return None
    for part in raw.split(b"&"):
        raw_name, _, raw_value = part.partition(b"=")
        name = _decoded(raw_name.replace(b"+", b" "))
        kind = text_problem(name)
        if kind is not None:
            return UnsafeValue(("query", escape_text(name)), kind)
        kind = text_problem(_decoded(raw_value.replace(b"+", b" ")))
        if kind is not None:
            return UnsafeValue(("query", name), kind)
    return None


def _in_headers(scope: Scope) -> UnsafeValue | None:
    headers = scope.get("headers", ())
    if b"\x00" not in b"".join([value for _name, value in headers]):  # one scan, usually
        return None
    name = next(name for name, value in headers if b"\x00" in value)
    return UnsafeValue(("header", name.decode("latin-1")), "nul")


async def _in_body(request: Request) -> UnsafeValue | None:
    body_field = getattr(request.scope.get("route"), "body_field", None)
    if body_field is None:
        return None  # the route reads no body (or streams it itself, like the edge's uploads)
    if isinstance(body_field.field_info, Form):
        form = await request.form()  # parsed by FastAPI already: the same object
        for name, value in form.multi_items():
            kind = text_problem(name)
            if kind is not None:
                return UnsafeValue(("body", escape_text(name)), kind)
            text = value if isinstance(value, str) else (value.filename or "")
            kind = text_problem(text)
            if kind is not None:
                return UnsafeValue(("body", name), kind)
        return None
    if not is_json_media_type(request.headers.get("content-type")) or not await request.body():
        return None  # not decoded: require_json_body refuses it (415)
    try:
        document = await request.json()  # decoded by FastAPI already, kept on the request
    except ValueError:
        return None
    return find_unsafe(document, ("body",))
