"""The upload form's text fields and headers: every part counted, each bounded, and values no
store, bus or response can carry refused (422 ``UNSAFE_INPUT``) with nothing stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from conclave.edge.store import evidence_packs
from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings

BOUNDARY = "form-fields-boundary"
MULTIPART = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
URL = "/api/edge-intake/image"


@pytest.fixture
def embedded(sqlite_engine, memory_bus) -> Backend:
    """Form checks do not depend on the store: SQLite is enough."""
    return Backend("embedded", sqlite_engine, memory_bus)


def _part(name: str, content: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return (
        f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + content + b"\r\n"
    )


def _body(*parts: bytes) -> bytes:
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


PNG = _part("file", samples.png(), "a.png")


async def _packs(backend: Backend) -> int:
    async with backend.engine.connect() as connection:
        query = select(func.count()).select_from(evidence_packs)
        return int((await connection.execute(query)).scalar_one())


def _temp_files(data_dir: Path) -> list[Path]:
    return list((data_dir / "blobs" / "tmp").glob("*.part"))


@pytest.mark.parametrize("naming", ["same name", "distinct names"])
async def test_a_million_parts_are_refused_without_reading_them(
    embedded, tmp_path, naming: str
) -> None:
    sent = 0

    async def parts() -> AsyncIterator[bytes]:
        nonlocal sent
        yield PNG
        for index in range(1_000_000):  # 52 MB, as in the report: must not be read to the end
            sent += 1
            yield _part("note" if naming == "same name" else f"note{index}", b"x")
        yield f"--{BOUNDARY}--\r\n".encode()

    async with edge_app(embedded, edge_settings(tmp_path)) as (client, _app):
        response = await client.post(URL, content=parts(), headers=MULTIPART)
        assert response.status_code == 413, response.text
        assert response.json()["code"] == "TOO_MANY_FIELDS"
    assert sent < 1_000, f"{sent} parts were read after the cap of 32"
    assert await _packs(embedded) == 0
    assert _temp_files(tmp_path) == []


async def test_fields_are_bounded_and_sent_once(embedded, tmp_path) -> None:
    distinct = [_part(f"f{i}", b"x") for i in range(33)]
    cases = [
        ("33 distinct fields", _body(PNG, *distinct), 413, "TOO_MANY_FIELDS"),
        ("an id field of 2 KiB", _body(PNG, _part("correlation_id", b"a" * 2048)), 413,
         "FIELD_TOO_LARGE"),
        ("unknown field of 2 MiB", _body(PNG, _part("extra", b"a" * 2 * 1024 * 1024)), 413,
         "FIELD_TOO_LARGE"),
        ("idempotency key twice", _body(PNG, _part("idempotency_key", b"k1"),
                                        _part("idempotency_key", b"k2")), 422, "DUPLICATE_FIELD"),
        ("metadata twice", _body(PNG, _part("metadata", b"{}"), _part("metadata", b'{"a":1}')),
         422, "DUPLICATE_FIELD"),
    ]  # fmt: skip
    async with edge_app(embedded, edge_settings(tmp_path)) as (client, _app):
        for label, body, status, code in cases:
            response = await client.post(URL, content=body, headers=MULTIPART)
            assert response.status_code == status, (label, response.text)
            assert response.json()["code"] == code, (label, response.json())
        # 32 fields (unknown ones skipped, one of 100 KiB) and a 60 KiB metadata object stay
        # within the limits.
        fields = [_part(f"f{i}", b"x") for i in range(30)] + [_part("notes", b"n" * 100_000)]
        metadata = _part("metadata", b'{"note": "' + b"n" * 60_000 + b'"}')
        accepted = await client.post(URL, content=_body(PNG, metadata, *fields), headers=MULTIPART)
        assert accepted.status_code == 200, accepted.text
    assert await _packs(embedded) == 1
    assert _temp_files(tmp_path) == []


UNSAFE_FIELDS = [
    ("lone surrogate in metadata", "metadata", b'{"note": "\\ud800"}', "metadata.note"),
    ("NUL in metadata", "metadata", b'{"note": "a\\u0000b"}', "metadata.note"),
    ("NUL in a metadata key", "metadata", b'{"a\\u0000": 1}', "metadata.a\\u0000"),
    ("NaN in metadata", "metadata", b'{"reading": NaN}', "metadata.reading"),
    ("Infinity in metadata", "metadata", b'{"reading": [-Infinity]}', "metadata.reading.0"),
    ("overflowing exponent", "metadata", b'{"reading": 1e309}', "metadata.reading"),
    ("integer beyond 64 bits", "metadata", b'{"count": 18446744073709551616}', "metadata.count"),
    ("5000-digit integer", "metadata", b'{"count": ' + b"9" * 5000 + b"}", "metadata.count"),
    ("invalid UTF-8 in metadata", "metadata", b'{"note": "\xff\xfe"}', "form.metadata"),
    ("encoded surrogate", "metadata", b'{"note": "\xed\xa0\x80"}', "form.metadata"),
    ("invalid UTF-8 in an id", "correlation_id", b"abc\xff", "form.correlation_id"),
    ("NUL in an id", "sampling_policy_ref", b"pol\x00icy", "form.sampling_policy_ref"),
    ("NUL in the idempotency key", "idempotency_key", b"key\x00", "form.idempotency_key"),
]


@pytest.mark.parametrize(
    ("label", "name", "value", "where"), UNSAFE_FIELDS, ids=[c[0] for c in UNSAFE_FIELDS]
)
async def test_unsafe_field_values_are_refused_and_nothing_is_stored(
    embedded, tmp_path, label: str, name: str, value: bytes, where: str
) -> None:
    async with edge_app(embedded, edge_settings(tmp_path)) as (client, _app):
        body = _body(PNG, _part(name, value))
        response = await client.post(URL, content=body, headers=MULTIPART)
        assert response.status_code == 422, response.text
        problem = response.json()
        assert problem["code"] == "UNSAFE_INPUT"
        assert problem["errors"][0]["field"] == where
        events = await client.get("/api/edge-intake/events")
        assert events.json()["count"] == 0
    assert await _packs(embedded) == 0
    assert _temp_files(tmp_path) == []


@pytest.mark.parametrize(
    "header",
    ["Idempotency-Key", "X-Conclave-Nonce", "X-Conclave-Signature", "X-Conclave-Timestamp"],
)
async def test_unsafe_upload_headers_are_refused(embedded, tmp_path, header: str) -> None:
    async with edge_app(embedded, edge_settings(tmp_path)) as (client, _app):
        headers = {**MULTIPART, header: b"abc\x00def"}
        response = await client.post(URL, content=_body(PNG), headers=headers)
        assert response.status_code == 422, response.text
        assert response.json()["code"] == "UNSAFE_INPUT"
        # Header names are case-insensitive; the platform's boundary names them in lower case.
        assert response.json()["errors"][0]["field"].lower() == f"header.{header}".lower()
    assert await _packs(embedded) == 0


async def test_evidence_ids_with_nul_are_refused_not_sent_to_the_store(
    backend: Backend, tmp_path
) -> None:
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        for suffix in ("", "/verify", "/content"):
            unsafe = await client.get(f"/api/edge-intake/evidence/%00abc{suffix}")
            assert unsafe.status_code == 422, unsafe.text
            assert unsafe.json()["code"] == "UNSAFE_INPUT"
            unknown = await client.get(f"/api/edge-intake/evidence/{'a' * 300}{suffix}")
            assert unknown.status_code == 404
            assert unknown.json()["code"] == "EVIDENCE_NOT_FOUND"
