"""Overview: each service's health, traffic, errors and latency, live.

The page polls its own fragment (``/overview/services``) every few seconds; the fragment carries
the services' totals in ``data-`` attributes and the page's script turns successive samples into
the small rate charts (the console keeps no history of its own).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from conclave import __version__
from conclave.console.figures import Figures, Health, figures_from_metrics, health_of
from conclave.console.session import Session
from conclave.console.upstream import ServiceProblem, Services
from conclave.console.web import ServicesDep, SignedIn, page

router = APIRouter(include_in_schema=False)


@dataclass
class ServiceView:
    """One service's row of the overview."""

    name: str
    url: str
    health: Health
    figures: Figures | None
    problem: str | None = None

    @property
    def degraded(self) -> bool:
        """Whether the row should catch the eye."""
        return self.health.status != "healthy" or bool(
            self.health.warnings or self.health.outbox_quarantined or self.problem
        )


@router.get("/health")
async def health() -> JSONResponse:
    """The console's own health: it serves (the services' health is on the overview; the
    console stays up, and says so, while one of them is down)."""
    return JSONResponse({"status": "healthy", "service": "console", "version": __version__})


@router.get("/")
async def home(session: SignedIn) -> RedirectResponse:
    """The console starts at the overview."""
    return RedirectResponse("/overview", status_code=303)


@router.get("/overview")
async def overview(request: Request, session: SignedIn, services: ServicesDep) -> HTMLResponse:
    """The overview page."""
    views = await _views(services, session)
    return page(request, "overview.html", session, views=views, sampled_at=time.time(),
                poll_seconds=request.app.state.settings.poll_seconds)  # fmt: skip


@router.get("/overview/services")
async def services_fragment(
    request: Request, session: SignedIn, services: ServicesDep
) -> HTMLResponse:
    """The overview's live part, polled by the page."""
    views = await _views(services, session)
    return page(request, "_services.html", session, views=views, sampled_at=time.time(),
                poll_seconds=request.app.state.settings.poll_seconds)  # fmt: skip


async def _views(services: Services, session: Session) -> list[ServiceView]:
    return list(await asyncio.gather(*(_view(services, name, session) for name in services.names)))


async def _view(services: Services, name: str, session: Session) -> ServiceView:
    url = services.url_of(name)
    try:
        health_answer, metrics_answer = await asyncio.gather(
            services.request("GET", name, "/health", session),
            services.request("GET", name, "/metrics", session),
        )
    except ServiceProblem as exc:
        return ServiceView(name, url, Health("unreachable", {}, []), None, exc.detail)
    try:
        health_body = health_answer.json()
    except ValueError:
        health_body = None
    health = health_of(health_body, health_answer.status_code)
    figures = None
    if metrics_answer.is_success:
        text = metrics_answer.content.decode("utf-8", "replace")
        # The exposition parser is pure Python: off the event loop.
        figures = await asyncio.to_thread(figures_from_metrics, text)
    return ServiceView(name, url, health, figures)
