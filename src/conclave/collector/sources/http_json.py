"""The ``http_json`` source: a JSON API we do not own, with pagination, rate limit and retries.

Spec fields: ``url``; ``records_path`` (dot path to the array in each response; the response itself
when absent); ``pagination`` = ``{"type": "page", "param": "page", "start": 1}`` (stops at an empty
page) or ``{"type": "next", "next_path": "next"}`` (follows a URL in the body); ``max_pages``
(default 1000); ``rate_limit_per_second``; ``retries`` (default 3, on 429/5xx/network errors);
``timeout_seconds`` (default 30); ``headers``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from conclave.collector.sources.base import SourceContext, SourceError
from conclave.settings import CollectorSettings


def _dig(document: Any, path: str | None) -> Any:
    for part in path.split(".") if path else []:
        document = document.get(part) if isinstance(document, dict) else None
    return document


def _host(url: str) -> str | None:
    return urlsplit(url).hostname


class HttpJsonSource:
    """Pages through a JSON HTTP API."""

    name = "http_json"

    def validate(self, spec: Mapping[str, Any], settings: CollectorSettings) -> None:
        """Check the URL and pagination."""
        url = spec.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError("an http_json source needs an http(s) 'url'")
        pagination = spec.get("pagination")
        if pagination is not None and (
            not isinstance(pagination, dict) or pagination.get("type") not in ("page", "next")
        ):
            raise ValueError("'pagination.type' must be 'page' or 'next'")
        headers = spec.get("headers", {})
        if not isinstance(headers, dict):
            raise ValueError("'headers' must be an object")

    async def fetch(
        self, spec: Mapping[str, Any], context: SourceContext
    ) -> AsyncIterator[list[Any]]:
        """Yield each page's records."""
        pagination = spec.get("pagination") or {}
        max_pages = int(spec.get("max_pages", 1000))
        rate = float(spec.get("rate_limit_per_second", 0) or 0)
        headers = {str(k): str(v) for k, v in (spec.get("headers") or {}).items()}
        if context.correlation_id:
            headers.setdefault("X-Correlation-ID", context.correlation_id)
        timeout = float(spec.get("timeout_seconds", 30))
        url: str | None = str(spec["url"])
        page = int(pagination.get("start", 1))
        async with httpx.AsyncClient(timeout=timeout, headers=headers) as client:
            for number in range(max_pages):
                if url is None:
                    return
                if number and rate > 0:
                    await asyncio.sleep(1 / rate)
                params = {str(pagination.get("param", "page")): page}
                body = await self._get(
                    client, url, params if pagination.get("type") == "page" else None, spec
                )
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
                    url = urljoin(url, following) if isinstance(following, str) else None
                    if url is not None and spec.get("headers") and _host(url) != _host(spec["url"]):
                        # The headers (a resolved secret among them) are for the spec's host only.
                        raise SourceError(f"{url}: the next page is on another host")
                else:
                    return

    async def _get(
        self,
        client: httpx.AsyncClient,
        url: str,
        params: dict[str, Any] | None,
        spec: Mapping[str, Any],
    ) -> Any:
        retries = int(spec.get("retries", 3))
        for attempt in range(retries + 1):
            try:
                response = await client.get(url, params=params)
            except httpx.TimeoutException as exc:
                error = SourceError(f"{url}: no answer within {client.timeout.read} s")
                error.__cause__ = exc
            except httpx.HTTPError as exc:
                error = SourceError(f"{url}: {type(exc).__name__}")
                error.__cause__ = exc
            else:
                if response.status_code == 429 or response.status_code >= 500:
                    error = SourceError(f"{url}: HTTP {response.status_code}")
                elif response.status_code >= 400:
                    raise SourceError(f"{url}: HTTP {response.status_code}")
                else:
                    try:
                        return response.json()
                    except ValueError as exc:
                        raise SourceError(f"{url}: the response is not JSON") from exc
            if attempt < retries:
                await asyncio.sleep(min(0.2 * 2**attempt, 5.0))
        raise error
