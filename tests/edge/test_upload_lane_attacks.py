"""Attacks on the upload path's fast lane and its blob placement that the change let through.

Each test drives the real app (SQLite and PostgreSQL) the way a client would and asserts what the
client sees and what was stored.
"""

from __future__ import annotations

import hashlib

import httpx
from sqlalchemy import func, select

from conclave.edge.store import evidence_packs
from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings, form


async def _pack_count(backend: Backend) -> int:
    async with backend.engine.connect() as connection:
        return int(
            (
                await connection.execute(select(func.count()).select_from(evidence_packs))
            ).scalar_one()
        )


async def test_an_upload_with_nul_in_its_query_is_refused_like_every_other_route(
    backend: Backend, tmp_path
) -> None:
    # Every route of every service refuses NUL or a lone surrogate in its query (the app-wide
    # dependency refuse_unsafe_values); the upload route did before it became a fast lane, and
    # still does for an unknown media type (served by the router). The lane skips the dependency.
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        for route in ("image", "no-such-type"):
            response = await client.post(
                f"/api/edge-intake/{route}?note=%00",
                **form(("photo.jpg", samples.jpeg_with_gps())),
            )
            assert response.status_code == 422, (route, response.text)
            problem = response.json()
            assert problem["code"] == "UNSAFE_INPUT", problem
            assert problem["errors"][0]["field"] == "query.note", problem
        assert await _pack_count(backend) == 0


async def test_an_upload_with_nul_in_any_header_is_refused_like_every_other_route(
    backend: Backend, tmp_path
) -> None:
    # Servers refuse NUL in a header; an app served in-process (as here, or behind another ASGI
    # server) gets what its client sends, and every router-served route answers 422 for it.
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        response = await client.post(
            "/api/edge-intake/image",
            headers={"X-Probe": b"a\x00b"},  # type: ignore[dict-item]
            **form(("photo.jpg", samples.jpeg_with_gps())),
        )
        assert response.status_code == 422, response.text
        problem = response.json()
        assert problem["code"] == "UNSAFE_INPUT", problem
        assert problem["errors"][0]["field"] == "header.x-probe", problem
        assert await _pack_count(backend) == 0


async def test_a_blob_store_that_refuses_a_file_of_a_multi_file_upload_is_503(
    backend: Backend, tmp_path
) -> None:
    # docs/edge.md: "A blob store that refuses the write (disk full, permissions) is 503
    # STORE_UNAVAILABLE, and nothing is committed." True for one file (placed by the parser
    # worker); an upload of two files places its blobs from a thread whose OSError escapes as 500.
    # The store is made to refuse by a plain file where the blob's folder must go (the tests may
    # run as root, which permissions do not stop).
    async with edge_app(backend, edge_settings(tmp_path)) as (client, app):
        files = [(f"photo-{n}.jpg", samples.jpeg_with_gps(latitude=10.0 + n)) for n in range(2)]
        shards = app.state.edge.blobs.root / "sha256"
        shards.mkdir(parents=True, exist_ok=True)
        for _name, content in files:
            (shards / hashlib.sha256(content).hexdigest()[:2]).write_bytes(b"not a folder")

        single = await client.post("/api/edge-intake/image", **form(files[0]))
        assert single.status_code == 503, single.text
        assert single.json()["code"] == "STORE_UNAVAILABLE"

        several = await client.post("/api/edge-intake/image", **form(files))
        assert several.status_code == 503, several.text
        assert several.json()["code"] == "STORE_UNAVAILABLE"
        assert await _pack_count(backend) == 0


async def test_a_content_length_with_thousands_of_leading_zeros_is_not_a_500(
    backend: Backend, tmp_path
) -> None:
    # HTTP allows leading zeros in Content-Length, and llhttp (uvicorn's httptools) passes such a
    # header on with its value intact. The lane's own header reading (and the body cap, for a
    # body that is not multipart) call int() on it: past 4300 digits Python refuses (ValueError)
    # and the client gets a 500 instead of its upload's answer.
    body, content_type = _multipart(("photo.jpg", samples.jpeg_with_gps()))
    padded = "0" * 4400 + str(len(body))
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        response = await client.post(
            "/api/edge-intake/image",
            content=body,
            headers={"content-type": content_type, "content-length": padded},
        )
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "created"

        not_multipart = await client.post(
            "/api/edge-intake/image",
            content=b"{}",
            headers={"content-type": "application/json", "content-length": "0" * 4400 + "2"},
        )
        assert not_multipart.status_code in (400, 415), not_multipart.text
        assert not_multipart.headers["content-type"] == "application/problem+json"


def _multipart(file: tuple[str, bytes]) -> tuple[bytes, str]:
    request = httpx.Request("POST", "http://edge/", files={"file": file})
    return request.read(), request.headers["content-type"]


async def test_ids_with_a_trailing_newline_are_refused(backend: Backend, tmp_path) -> None:
    # Not from this change (found while attacking it): the id patterns end in `$`, which also
    # matches before a final "\n", so "cam-7\n" passes as "1-128 characters of A-Z a-z 0-9 ..."
    # and is stored and published as another device than "cam-7"; the idempotency key likewise.
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        for fields in (
            {"metadata": '{"device_id": "cam-7\\n"}'},
            {"correlation_id": "corr-1\n"},
            {"sampling_policy_ref": "policy-a\n"},
            {"idempotency_key": "key-1\n"},
        ):
            response = await client.post(
                "/api/edge-intake/image",
                files=[("file", ("photo.jpg", samples.jpeg_with_gps()))],
                data=fields,
            )
            assert response.status_code == 422, (fields, response.text)
            assert response.json()["code"] == "VALIDATION_FAILED"
        assert await _pack_count(backend) == 0
