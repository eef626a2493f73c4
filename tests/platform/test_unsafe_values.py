"""Every ordinary route of a service refuses values no store, bus or response can carry, wherever
they come in (path, query, header, JSON body, form field), and answers a stored one escaped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import httpx
import pytest
from fastapi import FastAPI, Form, Header
from pydantic import BaseModel

from conclave.platform.problems import PROBLEM_MEDIA_TYPE
from tests.conftest import serve_app
from tests.platform.conftest import demo_app


class Note(BaseModel):
    text: str
    extra: dict[str, Any] = {}


class Stored(BaseModel):
    notes: list[Note]
    score: float


def build_app(seen: list[Any]) -> FastAPI:
    app = demo_app()

    @app.post("/notes")
    async def create_note(note: Note) -> Note:
        """Echo a note."""
        seen.append(note)
        return note

    @app.post("/forms")
    async def create_form(name: Annotated[str, Form()]) -> dict[str, str]:
        """Echo a form field."""
        seen.append(name)
        return {"name": name}

    @app.get("/notes/{note_id}")
    async def read_note(
        note_id: str, q: str = "", marker: Annotated[str | None, Header()] = None
    ) -> dict[str, Any]:
        """Echo what the route read."""
        seen.append((note_id, q, marker))
        return {"id": note_id, "q": q}

    @app.get("/stored")
    async def stored() -> Stored:
        """Rows stored before the boundary refused what they hold."""
        notes = [Note(text="fine"), Note(text="bad \ud800", extra={"n": float("nan")})]
        return Stored(notes=notes, score=float("inf"))

    @app.get("/stored-plain")
    async def stored_plain() -> dict[str, Any]:
        """The same, without a response model."""
        return {"rows": ["fine", "bad \udfff"]}

    return app


@pytest.fixture
def seen() -> list[Any]:
    return []


@pytest.fixture
async def client(seen: list[Any]) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(build_app(seen)) as client:
        yield client


def assert_unsafe(response: httpx.Response, field: str, kind: str) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE
    body = response.json()
    assert body["code"] == "UNSAFE_INPUT"
    assert body["errors"][0]["field"] == field
    assert body["errors"][0]["type"] == kind


@pytest.mark.parametrize(
    ("body", "field", "kind"),
    [
        (b'{"text": "\\ud800"}', "body.text", "lone_surrogate"),
        (b'{"text": "a\\u0000b"}', "body.text", "nul"),
        (b'{"text": "x", "extra": {"n": NaN}}', "body.extra.n", "non_finite_number"),
        (b'{"text": "x", "extra": {"n": 1e309}}', "body.extra.n", "non_finite_number"),
        (b'{"text": "x", "extra": {"n": Infinity}}', "body.extra.n", "non_finite_number"),
        (b'{"text": "x", "extra": {"n": 18446744073709551616}}', "body.extra.n",
         "integer_out_of_range"),
    ],
)  # fmt: skip
async def test_json_body_of_an_ordinary_route(
    client: httpx.AsyncClient, seen: list[Any], body: bytes, field: str, kind: str
) -> None:
    response = await client.post(
        "/notes", content=body, headers={"content-type": "application/json"}
    )
    assert_unsafe(response, field, kind)
    assert seen == []


async def test_unsafe_values_are_refused_before_the_schema_is_checked(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post(
        "/notes", content=b'{"text": 5, "\\udfff": 1}', headers={"content-type": "application/json"}
    )
    assert_unsafe(response, "body.\\udfff", "lone_surrogate")


@pytest.mark.parametrize(
    ("path", "field", "kind"),
    [
        ("/notes/a%00b", "path.note_id", "nul"),
        ("/notes/%ED%A0%80", "path.note_id", "lone_surrogate"),
        ("/notes/%FF", "path.note_id", "lone_surrogate"),
        ("/notes/1?q=%00", "query.q", "nul"),
        ("/notes/1?q=%ED%A0%80", "query.q", "lone_surrogate"),
        ("/notes/1?ok=1&q%00=1", "query.q\\u0000", "nul"),
    ],
)
async def test_path_and_query(
    client: httpx.AsyncClient, seen: list[Any], path: str, field: str, kind: str
) -> None:
    assert_unsafe(await client.get(path), field, kind)
    assert seen == []


async def test_header(client: httpx.AsyncClient, seen: list[Any]) -> None:
    response = await client.get("/notes/1", headers={"Marker": "a\x00b"})
    assert_unsafe(response, "header.marker", "nul")
    assert seen == []


async def test_form_field(client: httpx.AsyncClient, seen: list[Any]) -> None:
    response = await client.post("/forms", data={"name": "a\x00b"})
    assert_unsafe(response, "body.name", "nul")
    surrogate = await client.post(
        "/forms",
        content=b"name=%ED%A0%80",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    # Starlette decodes a form leniently: invalid UTF-8 arrives as U+FFFD, text that is safe.
    assert surrogate.status_code == 200
    assert seen == ["\ufffd\ufffd\ufffd"]


async def test_ordinary_values_pass(client: httpx.AsyncClient, seen: list[Any]) -> None:
    text = "naïve ☃ 𝄞 100%"
    created = await client.post("/notes", json={"text": text, "extra": {"n": 2**63 - 1}})
    assert created.status_code == 200
    assert created.json() == {"text": text, "extra": {"n": 2**63 - 1}}
    # Header bytes beyond ASCII are read as Latin-1 (as HTTP defines them): always safe text.
    marker = "é".encode()
    read = await client.get("/notes/na%C3%AFve", params={"q": text}, headers={"Marker": marker})
    assert read.json() == {"id": "naïve", "q": text}
    assert seen[-1] == ("naïve", text, marker.decode("latin-1"))


async def test_stored_unencodable_values_are_answered_escaped(client: httpx.AsyncClient) -> None:
    response = await client.get("/stored")
    assert response.status_code == 200
    assert response.json() == {
        "notes": [
            {"text": "fine", "extra": {}},
            # pydantic's JSON mode already writes a non-finite number in a free-form dict as null
            {"text": "bad \\ud800", "extra": {"n": None}},
        ],
        "score": "Infinity",
    }
    plain = await client.get("/stored-plain")
    assert plain.status_code == 200
    assert plain.json() == {"rows": ["fine", "bad \\udfff"]}


async def test_a_correlation_id_with_a_line_break_is_replaced(client: httpx.AsyncClient) -> None:
    response = await client.get("/notes/1", headers={"X-Correlation-ID": b"trace-42\n"})
    assert response.status_code == 200
    assert response.headers["x-correlation-id"] == response.headers["x-request-id"]
