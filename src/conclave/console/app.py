"""``create_app``: the operator console as an ASGI application (issue 21, docs/console.md).

A fifth, optional process. It imports no service package and keeps no state: each page is made
from the services' public APIs, asked as the signed-in user, whose credential travels in a sealed
cookie (:mod:`conclave.console.session`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from conclave import __version__
from conclave.console.pages import (
    audit,
    collections,
    dead_letters,
    evidence,
    evidence_upload,
    expeditions,
    graph,
    overview,
    schedules,
    signin,
    tools,
)
from conclave.console.security_headers import SecurityHeadersMiddleware
from conclave.console.session import COOKIE_NAME, SessionSealer
from conclave.console.upstream import ServiceProblem, Services, SignInExpired, service_client
from conclave.console.web import (
    SignInNeeded,
    html_error,
    problem_page,
    service_problem_page,
    sign_in_redirect,
)
from conclave.platform.errors import ConclaveError
from conclave.platform.http import create_service_app
from conclave.platform.metrics import ServiceMetrics
from conclave.platform.problem_types import ProblemCode, title_of
from conclave.settings.console import ConsoleSettings


def create_app(settings: ConsoleSettings) -> FastAPI:
    """The console app; its HTTP client to the services lives as long as the app serves."""
    secret = settings.session_key.get_secret_value()
    max_age = settings.session_hours * 3600
    sealer = SessionSealer(secret, max_age) if secret else SessionSealer.with_random_key(max_age)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        urls = settings.service_urls()
        budget = settings.upstream_timeout_seconds
        async with AsyncExitStack() as stack:
            clients = {
                name: await stack.enter_async_context(service_client(budget)) for name in urls
            }
            app.state.services = Services(urls, clients, budget)
            app.state.overview = overview.SharedOverview(app.state.services)
            yield

    app = create_service_app(
        service="console",
        title="Conclave operator console",
        version=__version__,
        description="See and steer the four services from a browser.",
        settings=settings,
        metrics=ServiceMetrics("console"),
        lifespan=lifespan,
        identity_route=False,  # it authenticates nobody itself: the services do
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.sealer = sealer
    app.state.settings = settings
    _install_html_errors(app)
    app.add_middleware(SecurityHeadersMiddleware)
    static = files("conclave.console") / "static"
    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    for module in (
        signin, overview, audit, tools, evidence_upload, evidence, expeditions, schedules,
        collections, graph, dead_letters,
    ):  # fmt: skip
        app.include_router(module.router)
    return app


def _install_html_errors(app: FastAPI) -> None:
    """Every error a page meets is shown as a page with the problem's title and detail: the
    platform's problem+json renderers stay the source of the status, code and detail."""
    as_json = dict(app.exception_handlers)

    async def on_sign_in_needed(request: Request, exc: Exception) -> Response:
        return sign_in_redirect(request)

    async def on_sign_in_expired(request: Request, exc: Exception) -> Response:
        response = sign_in_redirect(request)
        response.delete_cookie(COOKIE_NAME, path="/")
        return response

    async def on_service_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ServiceProblem)
        return service_problem_page(request, exc)

    async def on_conclave_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ConclaveError)
        return html_error(request, exc)

    def rendered_as_page(json_handler: object) -> object:
        async def handler(request: Request, exc: Exception) -> Response:
            answer = await json_handler(request, exc)  # type: ignore[operator]
            return _page_of_problem(request, answer)

        return handler

    app.add_exception_handler(SignInNeeded, on_sign_in_needed)
    app.add_exception_handler(SignInExpired, on_sign_in_expired)
    app.add_exception_handler(ServiceProblem, on_service_problem)
    app.add_exception_handler(ConclaveError, on_conclave_error)
    for error in (RequestValidationError, StarletteHTTPException, Exception):
        app.add_exception_handler(error, rendered_as_page(as_json[error]))  # type: ignore[arg-type]


def _page_of_problem(request: Request, answer: Response) -> HTMLResponse:
    body = json.loads(bytes(answer.body))
    code = str(body.get("code", ProblemCode.INTERNAL_ERROR))
    return problem_page(
        request,
        answer.status_code,
        str(body.get("title") or title_of(code)),
        str(body.get("detail", "")),
        code,
        body.get("errors"),
    )
