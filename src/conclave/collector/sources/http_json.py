"""The ``http_json`` source: a JSON API we do not own, with pagination, rate limit and retries.

Spec fields: ``url``; ``records_path`` (dot path to the array in each response; the response itself
when absent); ``pagination`` = ``{"type": "page", "param": "page", "start": 1}`` (stops at an empty
page) or ``{"type": "next", "next_path": "next"}`` (follows a URL in the body); ``max_pages``
(default and most: ``COLLECTOR_HTTP_JSON_MAX_PAGES``); ``rate_limit_per_second``; ``retries``
(default 3, on 429/5xx/network errors); ``timeout_seconds`` (default 30, for a whole page);
``headers``.

The caller names the URL, so every request goes through the platform's egress policy (every
connection, redirects and next-page URLs included) and every unreachable or refused target fails
with the same message. The caller's numbers are bounded by the settings: a request asking for more
is refused when it is validated; a stored spec (a schedule made under looser settings) is clamped
when it runs. Values in the answers that no store can hold are kept as escaped text.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urljoin

import httpx

from conclave.collector.sources.base import SourceContext, SourceError
from conclave.platform.credentials import is_reference
from conclave.platform.egress import UNREACHABLE, EgressPolicy, Resolver, guarded_client
from conclave.platform.egress import system_resolver as _system_resolver
from conclave.settings import CollectorSettings

_DEFAULT_RETRIES = 3
_DEFAULT_TIMEOUT_SECONDS = 30.0
_MAX_URL_CHARS = 4096
_MAX_RATE = 1000  # requests per second; 0 = as fast as the server answers
_MAX_HEADERS = 32
_MAX_HEADER_VALUE_CHARS = 4096
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}\Z")
_HEADER_VALUE = re.compile(r"^[\t\x20-\x7e]*\Z")
# Headers that decide where a request goes or how the connection is framed belong to the client.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "connection",
        "content-length",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "keep-alive",
        "expect",
        "proxy-authorization",
        "proxy-connection",
    }
)


def _dig(document: Any, path: str | None) -> Any:
    for part in path.split(".") if path else []:
        document = document.get(part) if isinstance(document, dict) else None
    return document


def _origin(url: str | httpx.URL) -> tuple[str, str, int | None]:
    parsed = httpx.URL(str(url))
    return parsed.scheme, parsed.host, parsed.port


class _OriginOnly:
    """A request hook refusing any hop (a redirect) away from the spec's origin while the spec
    sets headers: they may hold a resolved secret, bound to the spec's host. httpx itself drops
    only ``Authorization`` on a cross-origin redirect, not ``X-Api-Key`` and its kind."""

    def __init__(self, url: str) -> None:
        self._origin = _origin(url)

    async def __call__(self, request: httpx.Request) -> None:
        if _origin(request.url) != self._origin:
            raise _CrossOrigin(f"{request.url}: the spec's headers are for its own origin only")


class _CrossOrigin(Exception):
    pass


def _integer(spec: Mapping[str, Any], name: str, low: int, high: int, setting: str) -> None:
    value = spec.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"'{name}' must be a whole number from {low} to {high} ({setting})")


def _is_number(value: Any) -> bool:
    # Integers are compared as they are: math.isfinite(10**400) raises instead of answering.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def _number(spec: Mapping[str, Any], name: str, high: float, setting: str) -> None:
    value = spec.get(name)
    if value is None:
        return
    if not _is_number(value) or not 0 < value <= high:
        raise ValueError(f"'{name}' must be a number above 0 and at most {high:g} ({setting})")


def _check_url(url: Any) -> None:
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError("an http_json source needs an http(s) 'url'")
    if len(url) > _MAX_URL_CHARS:
        raise ValueError(f"'url' is longer than {_MAX_URL_CHARS} characters")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ValueError(f"'url' is not a valid URL: {exc}") from exc
    if not parsed.host:
        raise ValueError("'url' names no host")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise ValueError("'url' names a port outside 1-65535")


def _check_headers(headers: Any) -> None:
    if not isinstance(headers, dict):
        raise ValueError("'headers' must be an object")
    if len(headers) > _MAX_HEADERS:
        raise ValueError(f"'headers' may hold at most {_MAX_HEADERS} entries")
    for name, value in headers.items():
        if not _HEADER_NAME.match(name) or name.lower() in _RESERVED_HEADERS:
            raise ValueError(f"'headers' may not set {name[:128]!r}")
        if is_reference(value):
            continue  # a named secret: checked against the settings by parameter_secrets
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ValueError(f"'headers.{name}' must be a string")
        text = str(value)
        if len(text) > _MAX_HEADER_VALUE_CHARS or not _HEADER_VALUE.match(text):
            raise ValueError(
                f"'headers.{name}' must be printable ASCII of at most "
                f"{_MAX_HEADER_VALUE_CHARS} characters"
            )


def _check_pagination(pagination: Any) -> None:
    if pagination is None:
        return
    if not isinstance(pagination, dict) or pagination.get("type") not in ("page", "next"):
        raise ValueError("'pagination.type' must be 'page' or 'next'")
    start = pagination.get("start", 1)
    if isinstance(start, bool) or not isinstance(start, int) or abs(start) > 2**53:
        raise ValueError("'pagination.start' must be a whole number")
    for name in ("param", "next_path"):
        if name in pagination and not isinstance(pagination[name], str):
            raise ValueError(f"'pagination.{name}' must be a string")


class HttpJsonSource:
    """Pages through a JSON HTTP API, within the egress policy and the settings' limits.

    ``resolver`` turns host names into addresses (the operating system's by default)."""

    name = "http_json"

    def __init__(self, resolver: Resolver = _system_resolver) -> None:
        self._resolver = resolver

    def validate(self, spec: Mapping[str, Any], settings: CollectorSettings) -> None:
        """Check the URL, pagination, headers, and the numbers against the settings' limits."""
        _check_url(spec.get("url"))
        _check_pagination(spec.get("pagination"))
        _check_headers(spec.get("headers", {}))
        if "records_path" in spec and not isinstance(spec["records_path"], str | None):
            raise ValueError("'records_path' must be a string")
        pages = settings.http_json_max_pages
        _integer(spec, "max_pages", 1, pages, "COLLECTOR_HTTP_JSON_MAX_PAGES")
        retries = settings.http_json_max_retries
        _integer(spec, "retries", 0, retries, "COLLECTOR_HTTP_JSON_MAX_RETRIES")
        timeout = settings.http_json_max_timeout_seconds
        _number(spec, "timeout_seconds", timeout, "COLLECTOR_HTTP_JSON_MAX_TIMEOUT_SECONDS")
        rate = spec.get("rate_limit_per_second")
        if rate is not None and (not _is_number(rate) or not 0 <= rate <= _MAX_RATE):
            raise ValueError(f"'rate_limit_per_second' must be a number from 0 to {_MAX_RATE}")

    async def fetch(
        self, spec: Mapping[str, Any], context: SourceContext
    ) -> AsyncIterator[list[Any]]:
        """Yield each page's records."""
        settings = context.settings
        pagination = spec.get("pagination") or {}
        max_pages = min(
            int(spec.get("max_pages", settings.http_json_max_pages)), settings.http_json_max_pages
        )
        rate = float(spec.get("rate_limit_per_second", 0) or 0)
        headers = {str(k): str(v) for k, v in (spec.get("headers") or {}).items()}
        if context.correlation_id:
            headers.setdefault("X-Correlation-ID", context.correlation_id)
        timeout = min(
            float(spec.get("timeout_seconds", _DEFAULT_TIMEOUT_SECONDS)),
            settings.http_json_max_timeout_seconds,
        )
        retries = max(
            0, min(int(spec.get("retries", _DEFAULT_RETRIES)), settings.http_json_max_retries)
        )
        url: str | None = str(spec["url"])
        page = int(pagination.get("start", 1))
        policy = EgressPolicy.from_settings(settings, resolver=self._resolver)
        client = guarded_client(
            policy, timeout=timeout, max_redirects=settings.egress_max_redirects, headers=headers
        )
        if spec.get("headers"):
            client.event_hooks = {"request": [_OriginOnly(str(spec["url"]))], "response": []}
        async with client:
            for number in range(max_pages):
                if url is None:
                    return
                if number and rate > 0:
                    await asyncio.sleep(1 / rate)
                params = {str(pagination.get("param", "page")): page}
                query = params if pagination.get("type") == "page" else None
                body = await self._get(client, url, query, retries, timeout, settings)
                records = _dig(body, spec.get("records_path"))
                if not isinstance(records, list):
                    raise SourceError(f"{url}: the response (at records_path) is not an array")
                if not records and pagination.get("type") == "page":
                    return
                yield records
                if pagination.get("type") == "page":
                    page += 1
                elif pagination.get("type") == "next":
                    following = _dig(body, str(pagination.get("next_path", "next")))
                    url = _next_url(url, following) if isinstance(following, str) else None
                    if (
                        url is not None
                        and spec.get("headers")
                        and _origin(url) != _origin(str(spec["url"]))
                    ):
                        # The headers (a resolved secret among them) are for the spec's origin.
                        raise SourceError(f"{url}: the next page is on another origin")
                else:
                    return

    async def _get(
        self,
        client: httpx.AsyncClient,
        url: str,
        params: dict[str, Any] | None,
        retries: int,
        page_seconds: float,
        settings: CollectorSettings,
    ) -> Any:
        error = SourceError(f"{url}: {UNREACHABLE}")
        for attempt in range(retries + 1):
            try:
                # The client's time-out bounds each read; this bounds the whole page, so a server
                # dripping bytes cannot hold the run for longer than the caller's time-out.
                async with asyncio.timeout(page_seconds):
                    return await self._page(client, url, params, settings)
            except (httpx.RequestError, TimeoutError) as exc:
                # Refused by the egress policy, nothing listening, no such name, no answer in
                # time: one message, so the errors tell a caller nothing about the network.
                error = SourceError(f"{url}: {UNREACHABLE}")
                error.__cause__ = exc
            except _Retryable as exc:
                error = SourceError(str(exc))
            except _CrossOrigin as exc:
                raise SourceError(str(exc)) from exc
            if attempt < retries:
                await asyncio.sleep(min(0.2 * 2**attempt, 5.0))
        raise error

    async def _page(
        self,
        client: httpx.AsyncClient,
        url: str,
        params: dict[str, Any] | None,
        settings: CollectorSettings,
    ) -> Any:
        async with client.stream("GET", url, params=params) as response:
            status = response.status_code
            if status == 429 or status >= 500:
                raise _Retryable(f"{url}: HTTP {status}")
            if status >= 300:
                raise SourceError(f"{url}: HTTP {status}")
            content = await _read_at_most(response, settings.http_json_max_response_bytes, url)
        try:
            document = json.loads(content)
        except (ValueError, RecursionError) as exc:
            raise SourceError(f"{url}: the response is not JSON") from exc
        # Values no store can hold (lone surrogates, NUL, NaN, integers beyond 64 bits) are the
        # Tracker's to escape, for every source alike.
        return document


def _next_url(current: str, following: str) -> str:
    """The next page's address (the response chose it: it goes through the same checks)."""
    try:
        url = urljoin(current, following)
        httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise SourceError(f"{current}: the next-page URL is not valid") from exc
    return url


class _Retryable(Exception):
    """The server answered, but asked us to come back later (429) or failed (5xx)."""


async def _read_at_most(response: httpx.Response, limit: int, url: str) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise SourceError(f"{url}: the response is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise SourceError(f"{url}: the response is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
