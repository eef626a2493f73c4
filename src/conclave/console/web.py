"""What every page shares: templates, the signed-in user, CSRF checks, HTML problem pages."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, PackageLoader, select_autoescape

from conclave.console.session import COOKIE_NAME, CSRF_FIELD, Session, SessionSealer
from conclave.console.upstream import ServiceProblem, Services
from conclave.platform.errors import ConclaveError, Forbidden, UnsupportedMediaType
from conclave.platform.problem_types import ProblemCode, title_of

SHOWN_JSON_CHARS = 200_000
"""Longest JSON document a page shows (a call's arguments or result); the rest is cut, with a
note, so one huge result cannot make the page itself huge or slow to render."""

INDENTED_JSON_CHARS = 20_000
"""Largest document shown indented; a larger one is shown as compact JSON."""
INDENTED_JSON_DEPTH = 8
"""Deepest document shown indented (each level indents every line under it)."""

_SAFE_NEXT = re.compile(r"/(?![/\\])[A-Za-z0-9/_\-.~%?=&+]*")

templates = Jinja2Templates(
    env=Environment(
        loader=PackageLoader("conclave.console", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
)


def pretty_json(value: Any) -> str:
    """``value`` indented for reading, cut at :data:`SHOWN_JSON_CHARS`. A large document is
    shown compact: indenting makes ``json`` use its pure-Python encoder (about 50 ms for a
    quarter megabyte, on the event loop), the compact form its C encoder."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= INDENTED_JSON_CHARS and not _deeper_than(value, INDENTED_JSON_DEPTH):
        # Indentation grows with depth on every line: only a shallow document is indented.
        text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if len(text) > SHOWN_JSON_CHARS:
        return text[:SHOWN_JSON_CHARS] + f"\n… ({len(text) - SHOWN_JSON_CHARS:,} more characters)"
    return text


def _deeper_than(value: Any, depth: int) -> bool:
    """Whether ``value`` nests more than ``depth`` levels (walked no deeper than that)."""
    if not isinstance(value, dict | list):
        return False
    if depth <= 0:
        return True
    items = value.values() if isinstance(value, dict) else value
    return any(_deeper_than(item, depth - 1) for item in items)


templates.env.filters["pretty_json"] = pretty_json


class SignInNeeded(Exception):
    """No valid session: the page answers with a way to the sign-in form."""


def sealer_of(request: Request) -> SessionSealer:
    """The app's session sealer."""
    return request.app.state.sealer  # type: ignore[no-any-return]


def services_of(request: Request) -> Services:
    """The app's client of the four services."""
    return request.app.state.services  # type: ignore[no-any-return]


async def _signed_in(request: Request) -> Session:
    session = sealer_of(request).open(request.cookies.get(COOKIE_NAME))
    if session is None:
        raise SignInNeeded()
    return session


SignedIn = Annotated[Session, Depends(_signed_in)]
"""Route parameter: the signed-in user (no session: the browser is sent to sign in)."""

ServicesDep = Annotated[Services, Depends(services_of)]
"""Route parameter: the four services."""


def media_type_of(request: Request) -> str:
    """The request body's media type, lower case, without parameters ('' when none is given)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def url_encoded_form(request: Request) -> dict[str, str]:
    """A POSTed URL-encoded form's single text values (a repeated name keeps its last value).

    Any other body is refused (415) before it is read: the platform's body limit exempts
    multipart bodies (the edge streams its uploads), and Starlette's parser would spool every
    file part of one to disk however large, for anyone who can reach ``/signin``."""
    media_type = media_type_of(request)
    if not media_type:
        return {}  # no form at all (a bare POST): nothing is read, and its CSRF check fails
    if media_type != "application/x-www-form-urlencoded":
        raise UnsupportedMediaType("The console's forms are URL-encoded.")
    form = await request.form()
    return {key: value for key, value in form.items() if isinstance(value, str)}


async def checked_form(request: Request, session: Session) -> dict[str, str]:
    """A POSTed form whose CSRF token is the session's (403 ``CSRF_FAILED`` otherwise); only
    URL-encoded forms are read (:func:`url_encoded_form`)."""
    values = await url_encoded_form(request)
    if not session.csrf_matches(values.get(CSRF_FIELD)):
        raise Forbidden(
            "The form is stale or did not come from this console; reload the page and send it "
            "again.",
            code=ProblemCode.CSRF_FAILED,
        )
    return values


def safe_next(value: str | None) -> str:
    """Where to go after signing in: a path of this console only (no other site)."""
    if value and len(value) <= 2000 and _SAFE_NEXT.fullmatch(value):
        return value
    return "/"


def page(
    request: Request,
    template: str,
    session: Session | None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    """Render a template with what every page shows (who is signed in, the CSRF token)."""
    return templates.TemplateResponse(
        request,
        template,
        {"session": session, "csrf_field": CSRF_FIELD, **context},
        status_code=status_code,
    )


def problem_page(
    request: Request,
    status: int,
    title: str,
    detail: str,
    code: str,
    errors: list[dict[str, Any]] | None = None,
    service: str | None = None,
) -> HTMLResponse:
    """A problem shown as a page: its title, detail and code, never a stack trace."""
    session = sealer_of(request).open(request.cookies.get(COOKIE_NAME))
    return page(
        request,
        "problem.html",
        session,
        status_code=status,
        problem={
            "status": status,
            "title": title,
            "detail": detail,
            "code": code,
            "errors": errors or [],
            "service": service,
        },
    )


def sign_in_redirect(request: Request) -> Response:
    """Send the browser to the sign-in form, and back here afterwards. An htmx request gets
    ``HX-Redirect`` (a 303 would be followed and its sign-in page swapped into a fragment)."""
    wanted = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if request.headers.get("hx-request"):
        # A fragment's poll: back to the page that was polling, not to the bare fragment.
        page_url = urlsplit(request.headers.get("hx-current-url", ""))
        shown = page_url.path + (f"?{page_url.query}" if page_url.query else "")
        target = f"/signin?next={_quote_next(shown)}"
        return Response(status_code=204, headers={"HX-Redirect": target})
    target = f"/signin?next={_quote_next(wanted)}"
    return RedirectResponse(target, status_code=303)


def _quote_next(path: str) -> str:
    return quote(safe_next(path), safe="/")


def html_error(request: Request, error: ConclaveError) -> HTMLResponse:
    """A console error (bad input, stale form) as a page."""
    return problem_page(
        request, error.status, title_of(error.code), error.detail, error.code, error.errors
    )


def service_problem_page(request: Request, problem: ServiceProblem) -> HTMLResponse:
    """A service's problem as a page, naming the service."""
    return problem_page(
        request,
        problem.status,
        problem.title,
        problem.detail,
        problem.code,
        problem.errors,
        service=problem.service,
    )
