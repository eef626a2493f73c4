"""The ``http_json`` source is no SSRF tool and no port scanner (issue 15, defect 5)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from conclave.collector.sources.base import SourceContext, SourceError
from conclave.collector.sources.http_json import HttpJsonSource
from conclave.platform.egress import UNREACHABLE
from tests.collector.conftest import (
    LOCAL_API,
    JsonApi,
    collector_app,
    collector_settings,
    wait_terminal,
)
from tests.httpserver import free_port, running_server


def _discovery(url: str, **spec: Any) -> dict[str, Any]:
    source = {"type": "http_json", "url": url, "records_path": "data", "retries": 0, **spec}
    return {"expedition_type": "discovery", "parameters": {"sources": [source]}}


async def _failures(client, urls: list[str], **spec: Any) -> list[str]:
    """Run one discovery per URL; the error message of each (all must fail)."""
    ids = []
    for url in urls:
        response = await client.post("/expedition/run", json=_discovery(url, **spec))
        assert response.status_code == 202, response.text
        ids.append(response.json()["expedition_id"])
    messages = []
    for expedition_id in ids:
        record = await wait_terminal(client, expedition_id)
        assert record["status"] == "failed", record
        assert record["errors"][-1]["code"] == "EXPEDITION_FAILED"
        messages.append(record["errors"][-1]["message"])
    return messages


async def test_loopback_in_any_spelling_is_refused_and_never_fetched(backend, tmp_path):
    async with (
        JsonApi([[{"id": 1}]]) as api,
        collector_app(backend, collector_settings(tmp_path)) as (client, _app),
    ):
        port = api.url.split(":")[2].split("/")[0]
        hosts = ["127.0.0.1", "2130706433", "0x7f000001", "017700000001", "127.1", "localhost"]
        urls = [f"http://{host}:{port}/items" for host in hosts]
        messages = await _failures(client, urls)
    assert messages == [f"source http_json:{url} failed: {url}: {UNREACHABLE}" for url in urls]
    assert api.requests == 0


async def test_refused_closed_silent_and_unknown_targets_fail_alike(backend, tmp_path):
    # A port that accepts and never answers, one nothing listens on, a name that does not exist:
    # refused by the policy, then (loopback allowed on purpose) really tried. One message for all.
    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    async with await asyncio.start_server(never_answer, "127.0.0.1", 0) as silent_server:
        silent = f"http://127.0.0.1:{silent_server.sockets[0].getsockname()[1]}/items"
        closed = f"http://127.0.0.1:{free_port()}/items"
        unknown = "http://no-such-host.invalid/items"
        urls = [silent, closed, unknown]
        async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
            refused = await _failures(client, urls, timeout_seconds=0.5)
        allowed = collector_settings(tmp_path, **LOCAL_API)
        async with collector_app(backend, allowed) as (client, _app):
            tried = await _failures(client, urls, timeout_seconds=0.5)
    expected = [f"source http_json:{url} failed: {url}: {UNREACHABLE}" for url in urls]
    assert refused == tried == expected


async def test_the_allow_list_lets_a_deliberate_local_backend_through(backend, tmp_path):
    settings = collector_settings(tmp_path, **LOCAL_API)
    async with (
        JsonApi([[{"id": 1}, {"id": 2}]]) as api,
        collector_app(backend, settings) as (
            client,
            _app,
        ),
    ):
        response = await client.post("/expedition/run", json=_discovery(api.url, key="id"))
        record = await wait_terminal(client, response.json()["expedition_id"])
    assert record["status"] == "completed", record["errors"]
    assert record["results"]["records"]["inserted"] == 2


@pytest.mark.parametrize(
    ("spec", "limit"),
    [
        ({"max_pages": 1001}, "COLLECTOR_HTTP_JSON_MAX_PAGES"),
        ({"max_pages": 0}, "COLLECTOR_HTTP_JSON_MAX_PAGES"),
        ({"timeout_seconds": 3600}, "COLLECTOR_HTTP_JSON_MAX_TIMEOUT_SECONDS"),
        ({"timeout_seconds": "30"}, "COLLECTOR_HTTP_JSON_MAX_TIMEOUT_SECONDS"),
        ({"retries": 100}, "COLLECTOR_HTTP_JSON_MAX_RETRIES"),
        ({"retries": -1}, "COLLECTOR_HTTP_JSON_MAX_RETRIES"),
        ({"headers": {"Host": "metadata.google.internal"}}, "may not set 'Host'"),
        ({"headers": {"X-Evil": "a\r\nInjected: 1"}}, "printable ASCII"),
        ({"url": "http://0177.0.0.1/items"}, "not a valid URL"),
    ],
)
async def test_caller_numbers_and_headers_beyond_the_limits_are_refused(
    backend, tmp_path, spec, limit
):
    async with collector_app(backend, collector_settings(tmp_path)) as (client, _app):
        body = _discovery(**{"url": "https://api.example.org/items", **spec})
        response = await client.post("/expedition/run", json=body)
        history = (await client.get("/expedition/history")).json()
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "INVALID_PARAMETERS"
    assert limit in response.json()["detail"]
    assert history["count"] == 0


async def test_a_stored_spec_is_clamped_to_the_settings_when_it_runs(tmp_path):
    # A schedule saved under looser settings still runs within today's limits.
    settings = collector_settings(tmp_path, http_json_max_pages=2, **LOCAL_API)
    spec = {"url": "", "records_path": "data", "pagination": {"type": "page"}, "max_pages": 50}
    async with JsonApi([[{"id": page}] for page in range(10)]) as api:
        spec["url"] = api.url
        pages = [batch async for batch in HttpJsonSource().fetch(spec, SourceContext(settings))]
    assert pages == [[{"id": 0}], [{"id": 1}]]
    assert api.requests == 2


async def test_a_page_larger_than_the_limit_fails_the_source(tmp_path):
    settings = collector_settings(tmp_path, http_json_max_response_bytes=1024, **LOCAL_API)
    async with JsonApi([[{"id": "x" * 2000}]]) as api:
        spec = {"url": api.url, "records_path": "data"}
        with pytest.raises(SourceError, match="larger than 1024 bytes"):
            [batch async for batch in HttpJsonSource().fetch(spec, SourceContext(settings))]


async def test_a_name_resolving_to_a_refused_address_is_refused(tmp_path):
    async def rebinding_dns(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    settings = collector_settings(tmp_path)
    async with JsonApi([[{"id": 1}]]) as api:
        port = api.url.split(":")[2].split("/")[0]
        url = f"http://api.example.test:{port}/items"
        spec = {"url": url, "records_path": "data", "retries": 0}
        source = HttpJsonSource(resolver=rebinding_dns)
        with pytest.raises(SourceError) as failure:
            [batch async for batch in source.fetch(spec, SourceContext(settings))]
    assert str(failure.value) == f"{url}: {UNREACHABLE}"
    assert api.requests == 0


async def test_next_page_urls_pass_the_policy_too(tmp_path):
    # The API is allowed by name; the next-page URL it hands out points at loopback directly.
    hits: list[str] = []
    port = free_port()

    async def items(request: Request) -> JSONResponse:
        hits.append(request.url.path)
        following = {
            "/items": f"http://127.0.0.1:{port}/secret",
            "/broken": "http://[::1",
        }.get(request.url.path)
        return JSONResponse({"data": [{"id": request.url.path}], "next": following})

    async def api_dns(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    app = Starlette(routes=[Route("/{path:path}", items)])
    settings = collector_settings(tmp_path, egress_allow_hosts=["api.example.test"])
    source = HttpJsonSource(resolver=api_dns)
    base = f"http://api.example.test:{port}"
    async with running_server(app, port=port):
        for path, error in [
            ("/items", f"http://127.0.0.1:{port}/secret: {UNREACHABLE}"),
            ("/broken", f"{base}/broken: the next-page URL is not valid"),
        ]:
            spec = {"url": base + path, "records_path": "data", "retries": 0}
            spec["pagination"] = {"type": "next"}
            pages = []
            with pytest.raises(SourceError) as failure:
                async for batch in source.fetch(spec, SourceContext(settings)):
                    pages.append(batch)
            assert pages == [[{"id": path}]]
            assert str(failure.value) == error
    assert hits == ["/items", "/broken"]


async def test_values_no_store_can_hold_arrive_escaped(backend, tmp_path):
    # An API we do not own sends a lone surrogate, a NUL and NaN: the records are kept, readable.
    page = [{"id": 1, "name": "\ud800 and \u0000", "score": float("nan"), "big": 2**70}]
    settings = collector_settings(tmp_path, **LOCAL_API)
    async with JsonApi([page]) as api, collector_app(backend, settings) as (client, _app):
        body = _discovery(api.url, key="id", pagination={"type": "page"})
        body["target_collections"] = ["outside"]
        response = await client.post("/expedition/run", json=body)
        record = await wait_terminal(client, response.json()["expedition_id"])
        stored = await client.get("/collections/outside/records/1")
        history = await client.get("/expedition/history")
    assert record["status"] == "completed", record["errors"]
    assert stored.status_code == 200, stored.text
    assert stored.json()["data"] == {
        "id": 1,
        "name": "\\ud800 and \\u0000",
        "score": "NaN",
        "big": str(2**70),
    }
    assert history.status_code == 200
