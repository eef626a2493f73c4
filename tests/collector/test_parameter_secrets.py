"""Credentials in expedition parameters: named secrets resolved at run time, never stored, never
answered, never published; literal ones refused; whatever a stored row holds shown redacted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from sqlalchemy import select

from conclave.collector.events import REQUESTED
from conclave.platform.bus.base import Event
from conclave.platform.db.schema import outbox_events
from conclave.settings import CollectorSettings
from tests.collector.conftest import LOCAL_API, JsonApi, collector_app, wait_terminal
from tests.collector.test_ownership import ANN, OLGA, users_settings
from tests.conftest import Backend, eventually
from tests.httpserver import running_server

SECRET_VALUE = "Bearer s3cr3t-api-key-value"


def secret_settings(data_dir: Path, **overrides: Any) -> CollectorSettings:
    secrets = {"weather": {"value": SECRET_VALUE, "hosts": ["127.0.0.1"]}}
    return users_settings(data_dir, source_secrets=secrets, **LOCAL_API, **overrides)


async def published(backend: Backend) -> str:
    """Every event the collector committed for publication, as text."""
    async with backend.engine.connect() as connection:
        rows = (await connection.execute(select(outbox_events))).all()
    return json.dumps([dict(row._mapping) for row in rows], default=str)


async def test_named_secret_is_sent_but_never_shown(backend, tmp_path) -> None:
    async with (
        JsonApi([[{"id": "w1", "temp": 21}]]) as api,
        collector_app(backend, secret_settings(tmp_path)) as (client, _app),
    ):
        body = api.discovery("weather")
        body["parameters"]["sources"][0]["headers"] = {"Authorization": {"secret": "weather"}}
        run = await client.post("/expedition/run", json=body, headers=ANN)
        assert run.status_code == 202, run.text
        client.headers.update(ANN)
        record = await wait_terminal(client, run.json()["expedition_id"], timeout=60)
        assert record["status"] == "completed", record

        # The API we do not own received the credential ...
        assert api.headers[0]["authorization"] == SECRET_VALUE
        # ... and no answer, stored row or event of ours holds it: only its name.
        headers = record["parameters"]["sources"][0]["headers"]
        assert headers == {"Authorization": {"secret": "weather"}}
        answers = [
            await client.get(f"/expedition/status/{record['expedition_id']}", headers=OLGA),
            await client.get("/expedition/history", headers=OLGA),
            await client.get("/collections/weather/records/w1", headers=ANN),
        ]
        for answer in answers:
            assert answer.status_code == 200 and SECRET_VALUE not in answer.text
        assert "s3cr3t" not in await published(backend)


async def test_literal_credentials_are_refused(backend, tmp_path) -> None:
    async with (
        JsonApi([[{"id": "w1"}]]) as api,
        collector_app(backend, secret_settings(tmp_path, run_workers=False)) as (client, _),
    ):
        leaks: list[dict[str, Any]] = [
            {"Authorization": "Bearer literal-token"},
            {"X-Api-Key": "literal-token"},
            {"Cookie": "session=literal-token"},
        ]
        for headers in leaks:
            body = api.discovery("weather")
            body["parameters"]["sources"][0]["headers"] = headers
            refused = await client.post("/expedition/run", json=body, headers=ANN)
            assert refused.status_code == 422, refused.text
            assert refused.json()["code"] == "SECRET_IN_PARAMETERS"
            assert "literal-token" not in refused.text
        schedule = {"name": "s", "cron": "0 3 * * *", **api.discovery("weather")}
        schedule["parameters"]["sources"][0]["headers"] = leaks[0]
        refused = await client.post("/schedules", json=schedule, headers=ANN)
        assert refused.json()["code"] == "SECRET_IN_PARAMETERS"
        nested = {
            "expedition_type": "audit",
            "target_collections": ["weather"],
            "parameters": {"auth": {"user": "ann", "password": "literal-token"}},
        }
        refused = await client.post("/expedition/run", json=nested, headers=ANN)
        assert refused.json()["code"] == "SECRET_IN_PARAMETERS"
        # A credential in the URL itself: user info, or a query parameter named like one.
        for url in (
            api.url.replace("http://", "http://ann:literal-token@") + "/data",
            f"{api.url}/data?api_key=literal-token",
            f"{api.url}/data?page=1&access_token=literal-token",
        ):
            body = api.discovery("weather")
            body["parameters"]["sources"][0]["url"] = url
            refused = await client.post("/expedition/run", json=body, headers=ANN)
            assert refused.status_code == 422, (url, refused.text)
            assert refused.json()["code"] == "SECRET_IN_PARAMETERS"
            assert "literal-token" not in refused.text

        history = await client.get("/expedition/history", headers=OLGA)
        assert history.json()["expeditions"] == []
        assert "literal-token" not in await published(backend)


async def test_secret_references_must_be_usable(backend, tmp_path) -> None:
    async with (
        JsonApi([[{"id": "w1"}]]) as api,
        collector_app(backend, secret_settings(tmp_path, run_workers=False)) as (client, _),
    ):
        unknown = api.discovery("weather")
        unknown["parameters"]["sources"][0]["headers"] = {"Authorization": {"secret": "nope"}}
        # The secret may only travel to its own hosts: not to a URL the caller picked.
        elsewhere = api.discovery("weather")
        elsewhere["parameters"]["sources"][0]["url"] = api.url.replace("127.0.0.1", "localhost")
        elsewhere["parameters"]["sources"][0]["headers"] = {"Authorization": {"secret": "weather"}}
        # Nor into a record default, where it would be stored and searchable.
        stored = api.discovery("weather")
        stored["parameters"]["sources"][0]["defaults"] = {"note": {"secret": "weather"}}
        for body in (unknown, elsewhere, stored):
            refused = await client.post("/expedition/run", json=body, headers=ANN)
            assert refused.status_code == 422, refused.text
            assert refused.json()["code"] == "INVALID_SECRET_REFERENCE"
        assert (await client.get("/expedition/history", headers=OLGA)).json()["expeditions"] == []


async def test_credentials_in_bus_requested_runs_are_shown_redacted(backend, tmp_path) -> None:
    # Runs requested over the bus (by another service) are not refused, but what credential
    # keys hold is never answered.
    event = Event(
        channel=REQUESTED,
        payload={
            "expedition_type": "audit",
            "target_collections": ["weather"],
            "requested_by": "ann",
            "parameters": {"headers": {"Authorization": "Bearer from-the-bus"}, "depth": 2},
        },
        source="orchestrator",
    )
    async with collector_app(backend, secret_settings(tmp_path)) as (client, _app):
        await backend.bus.publish([event])

        async def listed() -> list[dict[str, Any]]:
            page = await client.get("/expedition/history", headers=ANN)
            return list(page.json()["expeditions"])

        [expedition] = await eventually(listed)
        assert expedition["parameters"] == {
            "headers": {"Authorization": "[redacted]"},
            "depth": 2,
        }
        status = await client.get(f"/expedition/status/{expedition['expedition_id']}", headers=ANN)
        assert "from-the-bus" not in status.text


async def test_secret_does_not_follow_a_next_link_to_another_host(backend, tmp_path) -> None:
    async with (
        JsonApi([[{"id": "w1"}]]) as api,
        JsonApi([[{"id": "x1"}]]) as elsewhere,
        collector_app(backend, secret_settings(tmp_path)) as (client, _app),
    ):
        api.next_url = elsewhere.url.replace("127.0.0.1", "localhost")
        body = api.discovery("weather")
        source = body["parameters"]["sources"][0]
        source["pagination"] = {"type": "next"}
        source["headers"] = {"Authorization": {"secret": "weather"}}
        run = await client.post("/expedition/run", json=body, headers=ANN)
        client.headers.update(ANN)
        record = await wait_terminal(client, run.json()["expedition_id"], timeout=60)
        assert record["status"] == "failed"
        assert "another origin" in record["errors"][-1]["message"]
        assert api.headers[0]["authorization"] == SECRET_VALUE
        assert elsewhere.requests == 0


async def test_secret_does_not_follow_a_redirect_to_another_origin(backend, tmp_path) -> None:
    # httpx drops `Authorization` on a cross-origin redirect, but not `X-Api-Key` and its kind:
    # the source refuses the hop itself while its spec sets headers.
    redirector = FastAPI()
    async with (
        JsonApi([[{"id": "x1"}]]) as elsewhere,
        running_server(redirector) as redirect_url,
        collector_app(backend, secret_settings(tmp_path)) as (client, _app),
    ):

        @redirector.get("/{path:path}")
        async def away() -> RedirectResponse:
            return RedirectResponse(elsewhere.url, status_code=302)

        body = elsewhere.discovery("weather")
        source = body["parameters"]["sources"][0]
        source["url"] = f"{redirect_url}/data"
        source["headers"] = {"X-Api-Key": {"secret": "weather"}}
        run = await client.post("/expedition/run", json=body, headers=ANN)
        assert run.status_code == 202, run.text
        client.headers.update(ANN)
        record = await wait_terminal(client, run.json()["expedition_id"], timeout=60)
        assert record["status"] == "failed"
        assert "own origin only" in record["errors"][-1]["message"]
        assert elsewhere.requests == 0  # the secret never left for the other origin
