"""The four services as the console reaches them: their public HTTP APIs, as the signed-in user.

The console decides nothing about access: every request carries the user's own bearer token and
each service answers what that user may see. A service's problem answer comes back as
:class:`ServiceProblem`, shown to the user with its title and detail; a service that cannot be
reached is a 503 ``SERVICE_UNREACHABLE`` naming it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import quote

import httpx

from conclave.console.session import Session
from conclave.platform.errors import BadRequest
from conclave.platform.problem_types import ProblemCode, title_of

MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""Largest answer the console reads from a service: a call's arguments and result are bounded by
the gateway's own body limits, so this only stops a misconfigured URL from filling memory."""


@dataclass
class ServiceProblem(Exception):
    """A service answered with an error (or could not be reached)."""

    service: str
    status: int
    title: str
    detail: str
    code: str
    errors: list[dict[str, Any]] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.service}: {self.status} {self.code}: {self.detail}"


@dataclass(frozen=True)
class Answer:
    """A service's answer, read whole (at most :data:`MAX_ANSWER_BYTES`)."""

    status_code: int
    headers: httpx.Headers
    content: bytes

    @property
    def is_success(self) -> bool:
        """A 2xx status."""
        return 200 <= self.status_code < 300

    def json(self) -> Any:
        """The body as JSON (``ValueError`` when it is none, or nests too deeply to read)."""
        try:
            return json.loads(self.content)
        except RecursionError as exc:
            raise ValueError("the JSON nests too deeply") from exc


class SignInExpired(Exception):
    """A service refused the session's credential (401): revoked token or expired JWT."""


def path_segment(value: str, what: str) -> str:
    """``value`` as one path segment of a service URL: percent-encoded, so a user-given id cannot
    walk to another route of the service (``../tools``, ``a/b``, ``?x``)."""
    if not value or value in (".", "..") or len(value) > 256:
        raise BadRequest(f"{what} is not an id.")
    return quote(value, safe="")


class _NoCookies(CookieJar):
    """A cookie jar that keeps nothing: the console's clients serve every user, so a cookie one
    service URL sets while one user looks (a proxy's session, a sticky load balancer) must never
    travel with another user's requests."""

    def __init__(self) -> None:
        super().__init__(policy=DefaultCookiePolicy(allowed_domains=[]))


def service_client(timeout_seconds: float) -> httpx.AsyncClient:
    """An HTTP client for one service: its own connection pool (a slow service holds only its
    own connections), no cookies, no proxy from the environment (the services' addresses come
    from settings), and answers asked uncompressed (``identity``) so that what is read is what
    is counted against :data:`MAX_ANSWER_BYTES`."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_seconds),
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
        trust_env=False,
        cookies=_NoCookies(),  # the jar itself: httpx would copy a Cookies into a plain jar
        headers={"Accept-Encoding": "identity"},
    )


class Services:
    """The services' clients, shared by every page; a request per service call, as the user."""

    def __init__(
        self, urls: dict[str, str], clients: dict[str, httpx.AsyncClient], budget_seconds: float
    ) -> None:
        self._urls = urls
        self._clients = clients
        self._budget = budget_seconds

    @property
    def names(self) -> list[str]:
        """The services, in the order the console shows them."""
        return list(self._urls)

    def url_of(self, service: str) -> str:
        """A service's base URL."""
        return self._urls[service]

    async def get(
        self, service: str, path: str, session: Session | None, params: dict[str, Any] | None = None
    ) -> Any:
        """``GET`` a JSON answer; a non-2xx answer raises :class:`ServiceProblem`."""
        response = await self.request("GET", service, path, session, params=params)
        return _json_of(service, response)

    async def post(
        self,
        service: str,
        path: str,
        session: Session,
        body: Any,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """``POST`` a JSON body; a non-2xx answer raises :class:`ServiceProblem`."""
        response = await self.request(
            "POST",
            service,
            path,
            session,
            content=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        return _json_of(service, response)

    async def request(
        self,
        method: str,
        service: str,
        path: str,
        session: Session | None,
        *,
        params: dict[str, Any] | None = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        max_bytes: int = MAX_ANSWER_BYTES,
    ) -> Answer:
        """One request to ``service`` as the session's user (``None``: no credential, for the
        routes that take none); the answer whatever its status, except 401 to a credential
        (:class:`SignInExpired`) and no usable answer within the time budget, whole answer
        included (503 ``ServiceProblem``) or past ``max_bytes`` or compressed (502)."""
        sent = {**(session.authorization() if session else {}), **(headers or {})}
        kept = {key: value for key, value in (params or {}).items() if value not in (None, "")}
        try:
            # The budget bounds the whole answer: httpx's own time-outs bound each read, and a
            # service sending a byte now and then would hold the page (and a connection) for ever.
            async with asyncio.timeout(self._budget):
                answer = await self._exchange(method, service, path, kept, content, sent, max_bytes)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise _unavailable(service, "did not answer in time") from exc
        except httpx.HTTPError as exc:
            raise _unavailable(service, "cannot be reached") from exc
        if answer.status_code == 401 and session is not None and session.credential:
            raise SignInExpired(service)
        return answer

    async def _exchange(
        self,
        method: str,
        service: str,
        path: str,
        params: dict[str, Any],
        content: bytes | None,
        headers: dict[str, str],
        max_bytes: int,
    ) -> Answer:
        client = self._clients[service]
        url = self._urls[service] + path
        async with client.stream(
            method, url, params=params, content=content, headers=headers
        ) as response:
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding != "identity":
                # Asked for identity: a compressed answer could inflate far past the limit
                # before it is counted.
                raise _unusable(service, f"a compressed answer ({encoding[:20]})")
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > max_bytes:
                    raise _unusable(service, "an answer too large to show")
            return Answer(response.status_code, response.headers, bytes(body))

    async def send_stream(
        self,
        service: str,
        path: str,
        session: Session,
        body: AsyncIterator[bytes],
        headers: dict[str, str],
        *,
        answer_seconds: float,
    ) -> Answer:
        """``POST`` a body as it is produced (never held whole: an upload relayed from the
        browser), as the session's user; the answer whatever its status (read whole, at most
        :data:`MAX_ANSWER_BYTES`), except 401 (:class:`SignInExpired`). There is no overall
        budget, since the body comes at the browser's pace: each write waits at most the usual
        time-out, and the answer, once the body is sent, ``answer_seconds``. An exception the
        body raises is raised here, the request to the service abandoned mid-body."""
        sent = {**session.authorization(), **headers, "Accept-Encoding": "identity"}
        client = self._clients[service]
        timeout = httpx.Timeout(self._budget, read=max(self._budget, answer_seconds))
        request = client.build_request(
            "POST", self._urls[service] + path, content=body, headers=sent, timeout=timeout
        )
        try:
            response = await client.send(request, stream=True)
            try:
                answer = bytearray()
                async for chunk in response.aiter_raw():
                    answer += chunk
                    if len(answer) > MAX_ANSWER_BYTES:
                        raise _unusable(service, "an answer too large to show")
            finally:
                await response.aclose()
        except httpx.TimeoutException as exc:
            raise _unavailable(service, "did not answer in time") from exc
        except httpx.HTTPError as exc:
            raise _unavailable(service, "cannot be reached") from exc
        if response.status_code == 401 and session.credential:
            raise SignInExpired(service)
        return Answer(response.status_code, response.headers, bytes(answer))

    async def open_stream(self, service: str, path: str, session: Session) -> httpx.Response:
        """``GET`` a body to relay as it arrives, never read whole: a 2xx answer whose body the
        caller reads and must close (``aclose``); any other status raises as :meth:`get` does
        (401 :class:`SignInExpired`, else :class:`ServiceProblem`)."""
        # Identity encoding: the bytes relayed are the stored ones, and so is their length.
        headers = {**session.authorization(), "Accept-Encoding": "identity"}
        client = self._clients[service]
        request = client.build_request("GET", self._urls[service] + path, headers=headers)
        try:
            response = await client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise _unavailable(service, "did not answer in time") from exc
        except httpx.HTTPError as exc:
            raise _unavailable(service, "cannot be reached") from exc
        if response.is_success:
            return response
        try:
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise _unusable(service, "an answer too large to show")
        except httpx.HTTPError as exc:
            raise _unavailable(service, "cannot be reached") from exc
        finally:
            await response.aclose()
        if response.status_code == 401 and session.credential:
            raise SignInExpired(service)
        raise problem_of(service, Answer(response.status_code, response.headers, bytes(body)))


def _unavailable(service: str, why: str) -> ServiceProblem:
    code = ProblemCode.SERVICE_UNREACHABLE
    return ServiceProblem(service, 503, title_of(code), f"The {service} service {why}.", code)


def unusable_answer(service: str, what: str) -> ServiceProblem:
    """502 ``UPSTREAM_ANSWER_INVALID``: ``service`` answered ``what``, which no page can show."""
    return _unusable(service, what)


def _unusable(service: str, what: str) -> ServiceProblem:
    code = ProblemCode.UPSTREAM_ANSWER_INVALID
    detail = f"The {service} service answered {what}."
    return ServiceProblem(service, 502, title_of(code), detail, code)


def _json_of(service: str, response: Answer) -> Any:
    if response.is_success:
        try:
            return response.json()
        except ValueError as exc:
            raise _unusable(service, "something that is not JSON") from exc
    raise problem_of(service, response)


def problem_of(service: str, response: Answer) -> ServiceProblem:
    """The problem a service's error answer carries (RFC 9457), or one made from its status."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {}
    errors = body.get("errors")
    return ServiceProblem(
        service=service,
        status=response.status_code,
        title=str(body.get("title") or "Error"),
        detail=str(body.get("detail") or f"The {service} service answered {response.status_code}."),
        code=str(body.get("code") or f"HTTP_{response.status_code}"),
        errors=[error for error in errors if isinstance(error, dict)]
        if isinstance(errors, list)
        else [],
    )
