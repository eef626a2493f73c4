"""Overview: each service's health, traffic, errors and latency, live.

The page polls its own fragment (``/overview/services``) every few seconds; the fragment carries
the services' totals in ``data-`` attributes and the page's script turns successive samples into
the small rate charts (the console keeps no history of its own).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from conclave import __version__
from conclave.console.figures import (
    MAX_HEALTH_BYTES,
    MAX_METRICS_BYTES,
    Figures,
    Health,
    figures_from_metrics,
    health_of,
)
from conclave.console.upstream import ServiceProblem, Services
from conclave.console.web import SignedIn, page

router = APIRouter(include_in_schema=False)

REUSE_SECONDS = 1.0


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
async def overview(request: Request, session: SignedIn) -> HTMLResponse:
    """The overview page."""
    views = await _views(request)
    return page(request, "overview.html", session, views=views, sampled_at=time.time(),
                poll_seconds=request.app.state.settings.poll_seconds)  # fmt: skip


@router.get("/overview/services")
async def services_fragment(request: Request, session: SignedIn) -> HTMLResponse:
    """The overview's live part, polled by the page."""
    views = await _views(request)
    return page(request, "_services.html", session, views=views, sampled_at=time.time(),
                poll_seconds=request.app.state.settings.poll_seconds)  # fmt: skip


class SharedOverview:
    """The services' health and figures, asked once for everyone who looks at the same moment.

    What the overview shows needs no credential and is the same for every user, so concurrent
    page loads and polls share one round of requests (and one parse of each exposition), and a
    round younger than :data:`REUSE_SECONDS` is shown again: however many tabs poll, the
    services see at most one round per second from the console."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self._latest: list[ServiceView] = []
        self._taken_at = -math.inf
        self._round: asyncio.Future[list[ServiceView]] | None = None

    async def views(self) -> list[ServiceView]:
        """The latest round, or the one under way, or a new one."""
        if time.monotonic() - self._taken_at < REUSE_SECONDS:
            return self._latest
        if self._round is None:
            self._round = asyncio.ensure_future(self._take())
        # Shielded: a caller that goes away does not cancel the round the others wait for.
        return await asyncio.shield(self._round)

    async def _take(self) -> list[ServiceView]:
        try:
            names = self._services.names
            views = list(await asyncio.gather(*(_view(self._services, n) for n in names)))
            self._latest, self._taken_at = views, time.monotonic()
            return views
        finally:
            self._round = None


def _views(request: Request) -> Awaitable[list[ServiceView]]:
    shared: SharedOverview = request.app.state.overview
    return shared.views()


async def _view(services: Services, name: str) -> ServiceView:
    url = services.url_of(name)
    # /health and /metrics take no credential: the user's token is not sent where it is not
    # needed (a wrong service URL would collect it at every poll).
    try:
        health_answer, metrics_answer = await asyncio.gather(
            services.request("GET", name, "/health", None, max_bytes=MAX_HEALTH_BYTES),
            services.request("GET", name, "/metrics", None, max_bytes=MAX_METRICS_BYTES),
        )
    except ServiceProblem as exc:
        return ServiceView(name, url, Health("unreachable", {}, []), None, exc.detail)
    try:
        health_body = health_answer.json()
    except ValueError:
        health_body = None
    health = health_of(health_body, health_answer.status_code)
    figures, problem = None, None
    if metrics_answer.is_success:
        text = metrics_answer.content.decode("utf-8", "replace")
        # The exposition parser is pure Python: off the event loop.
        figures = await asyncio.to_thread(figures_from_metrics, text)
        if figures is None:
            problem = "Its /metrics answer is not a Prometheus exposition."
    return ServiceView(name, url, health, figures, problem)
