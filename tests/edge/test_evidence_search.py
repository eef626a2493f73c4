"""The evidence search, ``GET /api/edge-intake/evidence``: a user pages through their own packs,
newest first, filtered; an operator through anyone's; nobody through another user's by asking."""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, text

from conclave.edge.evidence_search import PackFilter, search_packs, search_query
from conclave.edge.store import evidence_packs
from conclave.platform.auth import ACTING_USER_HEADER
from conclave.platform.media_types import media_type_names
from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import edge_app, edge_settings, form
from tests.edge.test_pack_ownership import ALICE, BOB, OLGA, PEOPLE

SEARCH = "/api/edge-intake/evidence"


async def _all_pages(client: Any, headers: dict[str, str], **params: Any) -> list[dict]:
    seen: list[dict] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = await client.get(SEARCH, params=query, headers=headers)
        assert response.status_code == 200, response.text
        page = response.json()
        assert page["count"] == len(page["packs"])
        seen += page["packs"]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen


async def _upload(
    client: Any, headers: dict[str, str], route: str = "image", **fields: Any
) -> list[str]:
    files = fields.pop("files", None) or [("a.png", samples.png(10, 10))]
    answer = await client.post(
        f"/api/edge-intake/{route}", **form(files, **fields), headers=headers
    )
    assert answer.status_code == 200, answer.text
    return list(answer.json()["evidence_ids"])


async def test_a_user_pages_through_their_own_packs_newest_first(
    backend: Backend, tmp_path
) -> None:
    async with edge_app(backend, edge_settings(tmp_path, **PEOPLE)) as (client, _app):
        for n in range(3):
            await _upload(
                client, ALICE, files=[(f"{n}-{k}.png", samples.png(8 + k, 8)) for k in range(2)]
            )
        report = samples.pdf()
        await _upload(client, ALICE, "document", files=[("r.pdf", report)])
        await _upload(client, BOB)

        packs = await _all_pages(client, ALICE, limit=3)
        # A last page holding exactly `limit` packs says it is the last.
        whole = (await client.get(SEARCH, params={"limit": 7}, headers=ALICE)).json()
        assert (whole["count"], whole["next_cursor"]) == (7, None)

        async with backend.engine.connect() as connection:
            rows = (
                await connection.execute(
                    select(evidence_packs.c.evidence_id, evidence_packs.c.created_at).where(
                        evidence_packs.c.uploaded_by == "alice"
                    )
                )
            ).all()
        expected = sorted(rows, key=lambda row: (row.created_at, row.evidence_id), reverse=True)
        assert [pack["evidence_id"] for pack in packs] == [row.evidence_id for row in expected]
        assert len(packs) == 7 and {pack["uploaded_by"] for pack in packs} == {"alice"}
        newest = packs[0]
        assert (newest["media_type"], newest["filename"], newest["format"]) == (
            "document",
            "r.pdf",
            "pdf",
        )
        assert newest["url"] == f"{SEARCH}/{newest['evidence_id']}"
        # Summaries only: what the client sent and what was extracted are one read away.
        assert "metadata" not in newest and "extracted" not in newest
        assert newest["size_bytes"] == len(report)
        whole_pack = (await client.get(newest["url"], headers=ALICE)).json()
        assert whole_pack["sha256"] == newest["sha256"]


async def test_filters_keep_only_the_packs_asked_for(backend: Backend, tmp_path) -> None:
    """With authentication off the device is named in the metadata and any caller may name the
    user it uploads as: one user's packs from several devices."""
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        as_ann = {ACTING_USER_HEADER: "ann"}
        first = await _upload(
            client, as_ann, metadata={"device_id": "cam-1"}, correlation_id="case-7"
        )
        await asyncio.sleep(0.02)
        between = datetime.now(UTC)
        await asyncio.sleep(0.02)
        second = await _upload(client, as_ann, metadata={"device_id": "cam-2"})
        doc = await _upload(
            client, as_ann, "document", files=[("d.pdf", samples.pdf())], correlation_id="case-7"
        )
        other = await _upload(client, {ACTING_USER_HEADER: "ben"}, metadata={"device_id": "cam-1"})

        def ids(packs: list[dict]) -> list[str]:
            return [pack["evidence_id"] for pack in packs]

        assert ids(await _all_pages(client, {}, device_id="cam-1")) == other + first
        assert ids(await _all_pages(client, {}, device_id="cam-2")) == second
        assert ids(await _all_pages(client, {}, correlation_id="case-7")) == doc + first
        assert ids(await _all_pages(client, {}, type="document")) == doc
        assert ids(await _all_pages(client, {}, user_id="ben")) == other
        assert ids(await _all_pages(client, {}, user_id="ann", device_id="cam-1")) == first
        assert ids(await _all_pages(client, {}, until=between.isoformat())) == first
        later = await _all_pages(client, {}, since=between.isoformat(), user_id="ann")
        assert ids(later) == doc + second
        assert await _all_pages(client, {}, device_id="no-such-device") == []
        assert await _all_pages(client, {}, type="audio") == []


async def test_nobody_lists_another_users_packs_but_an_operator(backend: Backend, tmp_path) -> None:
    async with edge_app(backend, edge_settings(tmp_path, **PEOPLE)) as (client, _app):
        alices = await _upload(client, ALICE)
        bobs = await _upload(client, BOB)

        assert [p["evidence_id"] for p in await _all_pages(client, BOB)] == bobs
        refused = await client.get(SEARCH, params={"user_id": "alice"}, headers=BOB)
        assert refused.status_code == 403
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["code"] == "FORBIDDEN"
        # Filters narrow a user's own packs; they never reach anyone else's.
        assert await _all_pages(client, BOB, device_id="alice") == []
        assert [p["evidence_id"] for p in await _all_pages(client, BOB, user_id="bob")] == bobs

        everyone = await _all_pages(client, OLGA)
        assert [p["evidence_id"] for p in everyone] == bobs + alices
        by_alice = await _all_pages(client, OLGA, user_id="alice")
        assert [p["evidence_id"] for p in by_alice] == alices
        assert (await client.get(SEARCH)).status_code == 401


async def test_a_cursor_positions_but_does_not_widen_the_search(backend: Backend, tmp_path) -> None:
    """A cursor made by hand (another user's pack, a time far ahead) moves the page, never past
    the caller's own packs."""
    async with edge_app(backend, edge_settings(tmp_path, **PEOPLE)) as (client, _app):
        alices = await _upload(client, ALICE)
        [bobs] = await _upload(client, BOB)
        forged = base64.urlsafe_b64encode(f"9999-12-31T00:00:00Z|{bobs}".encode()).decode()
        page = (await client.get(SEARCH, params={"cursor": forged}, headers=ALICE)).json()
        assert [pack["evidence_id"] for pack in page["packs"]] == alices


async def test_bad_search_input_is_a_clear_problem(backend: Backend, tmp_path) -> None:
    def cursor(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).decode()

    async with edge_app(backend, edge_settings(tmp_path, **PEOPLE)) as (client, _app):
        await _upload(client, ALICE)
        cases = [
            ({"cursor": "not a cursor"}, 400, "INVALID_CURSOR"),
            ({"cursor": cursor(b"2026-01-01T00:00:00|x")}, 400, "INVALID_CURSOR"),  # no zone
            ({"cursor": cursor(b"2026-01-01T00:00:00Z|x\x00y")}, 400, "INVALID_CURSOR"),
            ({"cursor": cursor(b"2026-01-01T00:00:00Z|\xff")}, 400, "INVALID_CURSOR"),
            ({"cursor": cursor(b"2026-01-01T00:00:00Z|" + b"k" * 260)}, 400, "INVALID_CURSOR"),
            ({"cursor": cursor(b"0001-01-01T00:00:00+14:00|x")}, 400, "INVALID_CURSOR"),
            ({"cursor": cursor(b"9999-12-31T23:59:59-14:00|x")}, 400, "INVALID_CURSOR"),
            ({"cursor": "x" * 401}, 422, "VALIDATION_FAILED"),
            ({"limit": 0}, 422, "VALIDATION_FAILED"),
            ({"limit": 101}, 422, "VALIDATION_FAILED"),
            ({"limit": 10**40}, 422, "VALIDATION_FAILED"),
            ({"limit": "NaN"}, 422, "VALIDATION_FAILED"),
            ({"since": "yesterday"}, 422, "VALIDATION_FAILED"),
            ({"since": "9999-12-31T23:59:59-14:00"}, 422, "VALIDATION_FAILED"),
            ({"until": "0001-01-01T00:00:00+14:00"}, 422, "VALIDATION_FAILED"),
            ({"until": "inf"}, 422, "VALIDATION_FAILED"),
            ({"device_id": "d" * 257}, 422, "VALIDATION_FAILED"),
            ({"correlation_id": "c" * 129}, 422, "VALIDATION_FAILED"),
            ({"device_id": "cam\x00"}, 422, "UNSAFE_INPUT"),
            ({"type": "image\x00"}, 422, "UNSAFE_INPUT"),
            ({"type": "nonesuch"}, 404, "UNKNOWN_MEDIA_TYPE"),
            ({"type": "t" * 10_000}, 404, "UNKNOWN_MEDIA_TYPE"),
            ({"user_id": "bob"}, 403, "FORBIDDEN"),
        ]
        for params, status, code in cases:
            response = await client.get(SEARCH, params=params, headers=ALICE)
            assert response.status_code == status, (params, response.text)
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["code"] == code, params
        unknown = await client.get(SEARCH, params={"type": "t" * 10_000}, headers=ALICE)
        assert len(unknown.text) < 2_000  # the refused value is not echoed whole
        # A lone surrogate, as its UTF-8-style bytes (no client library encodes one itself).
        for name in ("device_id", "correlation_id", "user_id"):
            surrogate = await client.get(f"{SEARCH}?{name}=%ED%A0%80", headers=OLGA)
            assert (surrogate.status_code, surrogate.json()["code"]) == (422, "UNSAFE_INPUT")
        # Values a store could choke on, asked by an operator, find nothing rather than fail.
        for params in ({"user_id": "é" * 256}, {"device_id": "'; DROP TABLE x; --"}):
            answer = await client.get(SEARCH, params=params, headers=OLGA)
            assert (answer.status_code, answer.json()["packs"]) == (200, []), params


# 100,000 packs as many uploads leave them: 100 users, 50 devices, every media type, one pack in
# a hundred with a correlation id, one a second.
_FILL = """
INSERT INTO edge_evidence_packs (evidence_id, chain_seq, media_type, format, mime_type, filename,
  sha256, size_bytes, client_metadata, extracted, device_id, correlation_id, idempotency_key,
  part_index, sampling_policy_ref, event_id, created_at, uploaded_by)
SELECT md5(n::text)::uuid::text, n, (CAST(:types AS text[]))[1 + n % :type_count], 'png',
  'image/png', 'f.png', md5(n::text) || md5(n::text), 10, '{}', '{}', 'device-' || (n % 50),
  CASE WHEN n % 100 = 0 THEN 'case-' || (n % 1000) END, NULL, 0, NULL,
  md5(n::text || 'e')::uuid::text, timestamptz '2026-01-01' + n * interval '1 second',
  'user-' || (n % 100)
FROM generate_series(1, 100000) AS n
"""


async def test_a_page_walks_an_index_among_100000_packs(postgres_engine) -> None:
    """Every filter, on a first page and after a cursor deep in the listing, is answered from an
    index: no scan of the table, whatever the filter."""
    types = list(media_type_names())
    async with postgres_engine.begin() as connection:
        await connection.execute(text(_FILL), {"types": types, "type_count": len(types)})
        await connection.execute(text("ANALYZE edge_evidence_packs"))
    deep = (datetime(2026, 1, 1, 6, tzinfo=UTC), "f" * 36)
    filters = [
        PackFilter(),
        PackFilter(uploaded_by="user-7"),
        PackFilter(uploaded_by="user-7", media_type=types[-1]),
        PackFilter(uploaded_by="nobody"),
        PackFilter(device_id="device-3"),
        PackFilter(correlation_id="case-500"),
        PackFilter(media_type=types[0]),
        PackFilter(since=datetime(2026, 1, 1, 12, tzinfo=UTC)),
    ]
    for kept in filters:
        for after in (None, deep):
            compiled = search_query(kept, after, 101).compile(postgres_engine)
            async with postgres_engine.connect() as connection:
                plan = await connection.exec_driver_sql(
                    f"EXPLAIN {compiled.string}",
                    tuple(compiled.params[name] for name in compiled.positiontup),
                )
                lines = [line for (line,) in plan]
            assert not any("Seq Scan" in line for line in lines), (kept, after, lines)
            assert any("edge_evidence_packs_" in line for line in lines), (kept, after, lines)
            rows = await search_packs(postgres_engine, kept, after, 101)
            assert len(rows) <= 101


async def test_a_summary_gives_the_packs_position(backend: Backend, tmp_path) -> None:
    """From the photo's EXIF GPS first, else from the client's coordinates (either spelling,
    numbers or numeric strings); none when neither says where (or only half of it)."""
    async with edge_app(backend, edge_settings(tmp_path)) as (client, _app):
        cases = [
            (samples.jpeg_with_gps(51.5, -0.12), {"latitude": 1, "longitude": 2}, "exif"),
            (samples.png(5, 5), {"lat": "-33.86", "lon": 151.2}, "metadata"),
            (samples.png(6, 5), {"latitude": 12.5, "longitude": "-7.25"}, "metadata"),
            (samples.png(7, 5), {"latitude": 12.5}, None),
            (samples.png(8, 5), {"note": "nowhere"}, None),
        ]
        for index, (content, metadata, _source) in enumerate(cases):
            answer = await client.post(
                "/api/edge-intake/image", **form((f"f{index}.img", content), metadata)
            )
            assert answer.status_code == 200, answer.text
        found = (await client.get(SEARCH)).json()["packs"][::-1]
        positions = [pack["position"] for pack in found]
        assert positions[0]["source"] == "exif"
        assert abs(positions[0]["latitude"] - 51.5) < 1e-4
        assert abs(positions[0]["longitude"] + 0.12) < 1e-4
        assert positions[1] == {"latitude": -33.86, "longitude": 151.2, "source": "metadata"}
        assert positions[2] == {"latitude": 12.5, "longitude": -7.25, "source": "metadata"}
        assert positions[3:] == [None, None]
