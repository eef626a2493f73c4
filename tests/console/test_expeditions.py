"""The console's Expeditions, Schedules, Collections and Graph pages over HTTP, as each user.

The collector decides who sees what; these tests check that the pages show its answers (another
user's expedition is its 404), that the forms refuse what the services could not carry before
sending it, and that a triggered expedition is followed to its end.
"""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from conclave.collector.store.tables import records as collected_records
from tests.conftest import Backend, eventually
from tests.console.conftest import TOKENS, Stack, auth, credential_of, open_stack
from tests.console.test_pages import session_csrf, signed_in

# Most tests share one stack (the collector queueing without running), on the module's event loop:
# the hostile forms and the undecodable bytes are sent by a user of their own (mallory), whose
# history must stay empty. The tests that need a store of their own say so.
pytestmark = pytest.mark.asyncio(loop_scope="module")

ITEMS = (
    '{"id": "a1", "title": "Red apple orchard"}\n{"id": "b2", "title": "Blue whale migration"}\n'
)
FILE_SOURCES = '[{"type": "file", "path": "items.jsonl", "key": "id"}]'


@pytest.fixture
async def working_stack(embedded: Backend, tmp_path: Path) -> AsyncIterator[Stack]:
    """The four services and the console, with the collector's workers running: expeditions
    move from queued to completed. Its file source reads ``<tmp_path>/inbox``."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "items.jsonl").write_text(ITEMS)
    collector = {"run_workers": True, "poll_seconds": 0.05, "scheduler_poll_seconds": 0.1}
    async with open_stack(embedded, tmp_path, per_service={"collector": collector}) as running:
        yield running


async def run_expedition(stack: Stack, user: str, collection: str, **extra: Any) -> str:
    """Queue a file discovery as ``user`` through the collector's API; its id."""
    body = {
        "expedition_type": "discovery",
        "target_collections": [collection],
        "parameters": {"sources": [{"type": "file", "path": "items.jsonl", "key": "id"}]},
        **extra,
    }
    async with httpx.AsyncClient(base_url=stack.urls["collector"]) as client:
        answer = await client.post("/expedition/run", json=body, headers=auth(user))
    assert answer.status_code == 202, answer.text
    return str(answer.json()["expedition_id"])


async def collector_status(stack: Stack, user: str, expedition_id: str) -> dict[str, Any]:
    """The expedition as ``user`` sees it in the collector's API."""
    async with httpx.AsyncClient(base_url=stack.urls["collector"]) as client:
        answer = await client.get(f"/expedition/status/{expedition_id}", headers=auth(user))
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def history_count(stack: Stack, user: str) -> int:
    """How many expeditions ``user`` has in the collector."""
    async with httpx.AsyncClient(base_url=stack.urls["collector"]) as client:
        answer = await client.get("/expedition/history", params={"limit": 500}, headers=auth(user))
    return int(answer.json()["count"])


def listed(html: str) -> set[str]:
    """The expeditions a history page lists."""
    return set(re.findall(r'data-expedition="([^"]+)"', html))


# A fresh stack: the pages are checked to list exactly alice's and bob's expeditions, and the
# collector's counts of everyone's.
@pytest.mark.asyncio(loop_scope="function")
async def test_a_user_follows_and_cancels_only_their_own_expeditions(stack: Stack) -> None:
    # The test stack's collector queues without running: both stay queued, so cancellable.
    alice_id = await run_expedition(stack, "alice", "alices")
    bob_id = await run_expedition(stack, "bob", "bobs")

    async with signed_in(stack, TOKENS["alice"]) as alice:
        page = await alice.get("/expeditions")
        assert page.status_code == 200
        assert listed(page.text) == {alice_id}
        # Her expedition is queued: the list polls its first page, filters kept.
        assert 'data-live="yes"' in page.text
        assert 'hx-get="/expeditions/table"' in page.text
        # The collector's counts, of what she may see: her own expedition, not bob's.
        assert "Totals: 1 queued" in page.text
        table = await alice.get("/expeditions/table", params={"status": "queued"})
        assert listed(table.text) == {alice_id} and "<html" not in table.text
        assert 'hx-get="/expeditions/table?status=queued"' in table.text
        done = await alice.get("/expeditions", params={"status": "completed"})
        assert listed(done.text) == set() and 'data-live="no"' in done.text
        own = await alice.get(f"/expeditions/{alice_id}")
        assert own.status_code == 200
        assert 'data-field="status">queued' in own.text
        # Queued: the live part polls itself, and a Cancel button is offered.
        assert f'hx-get="/expeditions/{alice_id}/live"' in own.text
        assert "Cancel expedition" in own.text
        # Bob's expedition by its id: the collector's 404, nothing of bob's shown.
        other = await alice.get(f"/expeditions/{bob_id}")
        assert other.status_code == 404
        assert "EXPEDITION_NOT_FOUND" in other.text and "bobs" not in other.text
        assert (await alice.get(f"/expeditions/{bob_id}/live")).status_code == 404
        csrf = session_csrf(own.text)
        refused = await alice.post(f"/expeditions/{bob_id}/cancel", data={"csrf_token": csrf})
        assert refused.status_code == 404 and "EXPEDITION_NOT_FOUND" in refused.text
        # Without the session's CSRF token nothing is cancelled, not even her own.
        stale = await alice.post(f"/expeditions/{alice_id}/cancel", data={"csrf_token": "x"})
        assert stale.status_code == 403 and "CSRF_FAILED" in stale.text
        assert (await collector_status(stack, "alice", alice_id))["status"] == "queued"
        # A path segment cannot walk to another collector route.
        assert (await alice.get("/expeditions/..%2Fhistory")).status_code in (400, 404)

    assert (await collector_status(stack, "bob", bob_id))["status"] == "queued"

    async with signed_in(stack, TOKENS["olga"]) as olga:
        page = await olga.get("/expeditions")
        assert listed(page.text) == {alice_id, bob_id}
        detail = await olga.get(f"/expeditions/{bob_id}")
        cancelled = await olga.post(
            f"/expeditions/{bob_id}/cancel", data={"csrf_token": session_csrf(detail.text)}
        )
        assert cancelled.status_code == 303
        assert cancelled.headers["location"] == f"/expeditions/{bob_id}"
        after = await olga.get(f"/expeditions/{bob_id}")
        assert 'data-field="status">cancelled' in after.text
        # Finished: the live part stops polling and offers no cancel.
        assert "hx-get" not in after.text.split('id="expedition-live"')[1]
        assert "Cancel expedition" not in after.text
        # Cancelling again: the collector's 409, shown.
        again = await olga.post(
            f"/expeditions/{bob_id}/cancel", data={"csrf_token": session_csrf(detail.text)}
        )
        assert again.status_code == 409 and "EXPEDITION_FINISHED" in again.text
        filtered = await olga.get("/expeditions", params={"status": "cancelled"})
        assert listed(filtered.text) == {bob_id}
    assert (await collector_status(stack, "bob", bob_id))["status"] == "cancelled"


async def test_the_trigger_form_queues_an_expedition_as_the_user(shared_stack: Stack) -> None:
    async with signed_in(shared_stack, TOKENS["alice"]) as alice:
        form = await alice.get("/expeditions/new")
        assert form.status_code == 200
        assert "<option>discovery</option>" in form.text and "<option>audit</option>" in form.text
        sent = await alice.post(
            "/expeditions/new",
            data={
                "csrf_token": session_csrf(form.text),
                "expedition_type": "discovery",
                "collections": "things, more",
                "priority": "high",
                "sources": FILE_SOURCES,
                "parameters": '{"required_fields": ["title"]}',
            },
        )
        assert sent.status_code == 303, sent.text
        expedition_id = sent.headers["location"].rsplit("/", 1)[1]
        shown = await alice.get(sent.headers["location"])
        assert "things" in shown.text and "items.jsonl" in shown.text
    stored = await collector_status(shared_stack, "alice", expedition_id)
    assert stored["requested_by"] == "alice"
    assert stored["priority"] == "high"
    assert stored["target_collections"] == ["things", "more"]
    assert stored["parameters"] == {
        "required_fields": ["title"],
        "sources": [{"type": "file", "path": "items.jsonl", "key": "id"}],
    }


@pytest.mark.parametrize(
    ("fields", "shown"),
    [
        (
            {"sources": '[{"type": "file", "path": "a.jsonl", "n": NaN}]'},
            "NaN is not a JSON number",
        ),
        ({"sources": '[{"n": -Infinity}]'}, "-Infinity is not a JSON number"),
        ({"sources": '[{"n": 1e999}]'}, "too large a number"),
        ({"sources": '[{"n": 123456789012345678901234567890}]'}, "at most 64 bits"),
        (
            {"sources": '[{"n": "' + "9" * 5000 + '"}]'},
            "INVALID_PARAMETERS",
        ),
        ({"sources": '[{"path": "\\ud800"}]'}, "lone surrogate"),
        ({"sources": '[{"path": "a\\u0000b"}]'}, "NUL"),
        ({"sources": "[" * 5000 + "]" * 5000}, "Nested deeper than 32"),
        ({"sources": '{"type": "file"}'}, "a JSON list"),
        ({"sources": "[{'type': 'file'}]"}, "Not JSON"),
        ({"parameters": "[1]"}, "a JSON object"),
        ({"sources": "x" * 70_000}, "At most 65,536 characters"),
        ({"expedition_type": "no-such-type"}, "UNKNOWN_EXPEDITION_TYPE"),
        ({"collections": "bad/name"}, "VALIDATION_FAILED"),
        ({"collections": "a\x00b"}, "UNSAFE_INPUT"),
        ({"priority": "urgent"}, "VALIDATION_FAILED"),
        ({"sources": '[{"type": "file", "path": "../../etc/passwd"}]'}, "FILE_REFUSED"),
        ({"parameters": '{"headers": {"Authorization": "Bearer x"}}'}, "SECRET_IN_PARAMETERS"),
    ],
)
async def test_hostile_trigger_forms_are_shown_back_and_queue_nothing(
    shared_stack: Stack, fields: dict[str, str], shown: str
) -> None:
    async with signed_in(shared_stack, credential_of("mallory")) as mallory:
        form = await mallory.get("/expeditions/new")
        data = {
            "csrf_token": session_csrf(form.text),
            "expedition_type": "discovery",
            "collections": "things",
            "priority": "medium",
            "sources": FILE_SOURCES,
            **fields,
        }
        answer = await mallory.post("/expeditions/new", data=data)
        assert answer.status_code == 422, answer.text[:2000]
        assert shown in answer.text, answer.text.split('role="alert"')[1][:600]
        # The form comes back (with what was typed) and carries the problem inline.
        assert 'role="alert"' in answer.text and 'action="/expeditions/new"' in answer.text
    assert await history_count(shared_stack, "mallory") == 0


async def test_undecodable_form_bytes_and_a_missing_csrf_token_queue_nothing(
    shared_stack: Stack,
) -> None:
    async with signed_in(shared_stack, credential_of("mallory")) as mallory:
        csrf = session_csrf((await mallory.get("/expeditions/new")).text)
        # A lone surrogate's UTF-8 bytes, percent-encoded, in a form value.
        raw = f"csrf_token={csrf}&expedition_type=discovery&collections=%ED%A0%80&sources=%5B%5D"
        answer = await mallory.post(
            "/expeditions/new",
            content=raw,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert 400 <= answer.status_code < 500 and "<h1" in answer.text
        no_csrf = await mallory.post("/expeditions/new", data={"expedition_type": "discovery"})
        assert no_csrf.status_code == 403 and "CSRF_FAILED" in no_csrf.text
    assert await history_count(shared_stack, "mallory") == 0


async def test_schedules_are_added_listed_and_removed_per_user(shared_stack: Stack) -> None:
    async with signed_in(shared_stack, TOKENS["bob"]) as bob:
        csrf = session_csrf((await bob.get("/schedules")).text)
        await bob.post(
            "/schedules",
            data={
                "csrf_token": csrf,
                "name": "bobs-nightly",
                "cron": "0 3 * * *",
                "expedition_type": "audit",
                "collections": "bobs",
            },
        )
    async with signed_in(shared_stack, TOKENS["alice"]) as alice:
        page = await alice.get("/schedules")
        assert "No schedules." in page.text
        csrf = session_csrf(page.text)
        added = await alice.post(
            "/schedules",
            data={
                "csrf_token": csrf,
                "name": "hourly-things",
                "cron": "0 * * * *",
                "expedition_type": "discovery",
                "collections": "things",
                "sources": FILE_SOURCES,
                "enabled": "paused",
            },
        )
        assert added.status_code == 303, added.text
        page = await alice.get("/schedules")
        assert 'data-schedule="hourly-things"' in page.text and "bobs-nightly" not in page.text
        assert "paused" in page.text.split('data-schedule="hourly-things"')[1].split("</tr>")[0]
        bad_cron = await alice.post(
            "/schedules",
            data={
                "csrf_token": csrf,
                "name": "x",
                "cron": "every tuesday",
                "expedition_type": "audit",
            },
        )
        assert bad_cron.status_code == 422 and "cron" in bad_cron.text
        assert 'value="every tuesday"' in bad_cron.text
        taken = await alice.post(
            "/schedules",
            data={
                "csrf_token": csrf,
                "name": "hourly-things",
                "cron": "0 * * * *",
                "expedition_type": "audit",
            },
        )
        assert taken.status_code == 409 and "SCHEDULE_EXISTS" in taken.text
        # Resumed, then paused again, with the row's buttons.
        resumed = await alice.post("/schedules/hourly-things/resume", data={"csrf_token": csrf})
        assert resumed.status_code == 303
        row = (await alice.get("/schedules")).text.split('data-schedule="hourly-things"')[1]
        assert "<td>active</td>" in row.split("</tr>")[0] and ">Pause</button>" in row
        paused = await alice.post("/schedules/hourly-things/pause", data={"csrf_token": csrf})
        assert paused.status_code == 303
        row = (await alice.get("/schedules")).text.split('data-schedule="hourly-things"')[1]
        assert "<td>paused</td>" in row.split("</tr>")[0] and ">Resume</button>" in row
        # Bob's schedule is not alice's to pause or remove: the collector's 404.
        other = await alice.post("/schedules/bobs-nightly/pause", data={"csrf_token": csrf})
        assert other.status_code == 404 and "SCHEDULE_NOT_FOUND" in other.text
        stale = await alice.post("/schedules/hourly-things/resume", data={"csrf_token": "x"})
        assert stale.status_code == 403
        other = await alice.post("/schedules/bobs-nightly/remove", data={"csrf_token": csrf})
        assert other.status_code == 404 and "SCHEDULE_NOT_FOUND" in other.text
        removed = await alice.post("/schedules/hourly-things/remove", data={"csrf_token": csrf})
        assert removed.status_code == 303
        # ".." is a schedule name the collector takes; the page's buttons name it by its id.
        dots = {"csrf_token": csrf, "name": "..", "cron": "0 * * * *", "expedition_type": "audit"}
        assert (await alice.post("/schedules", data=dots)).status_code == 303
        row = (await alice.get("/schedules")).text.split('data-schedule=".."')[1]
        action = re.search(r'action="(/schedules/[^"]+/remove)"', row)
        assert action is not None
        assert (await alice.post(action.group(1), data={"csrf_token": csrf})).status_code == 303
        assert "No schedules." in (await alice.get("/schedules")).text
    async with signed_in(shared_stack, TOKENS["olga"]) as olga:
        page = await olga.get("/schedules")
        assert 'data-schedule="bobs-nightly"' in page.text


# A stack of its own: the collector runs its workers.
@pytest.mark.asyncio(loop_scope="function")
async def test_a_triggered_expedition_runs_to_the_end_and_fills_its_collection(
    working_stack: Stack,
) -> None:
    stack = working_stack
    async with signed_in(stack, TOKENS["alice"]) as alice:
        csrf = session_csrf((await alice.get("/expeditions/new")).text)
        sent = await alice.post(
            "/expeditions/new",
            data={
                "csrf_token": csrf,
                "expedition_type": "discovery",
                "collections": "things",
                "sources": FILE_SOURCES,
            },
        )
        assert sent.status_code == 303, sent.text
        live = sent.headers["location"] + "/live"

        async def finished() -> str | None:
            fragment = (await alice.get(live)).text
            return fragment if 'data-status="completed"' in fragment else None

        fragment = await eventually(finished, timeout=30)
        assert 'data-field="progress">100 %' in fragment
        assert "hx-get" not in fragment and "Cancel expedition" not in fragment
        agents = fragment.split('data-field="agents">')[1].split("<")[0]
        assert {"tracker", "binder"} <= set(agents.split(", "))

        async def indexed() -> str | None:
            page = (await alice.get("/collections")).text
            return page if re.search(r'data-field="vectors">2<', page) else None

        page = await eventually(indexed, timeout=30)
        row = page.split('data-collection="things"')[1].split("</tr>")[0]
        assert 'data-field="records">2<' in row and 'data-field="drift">0<' in row
        found = await alice.get("/collections/things/search", params={"q": "whale"})
        assert found.status_code == 200 and 'data-hit="b2"' in found.text
        assert "Blue whale migration" in found.text

        # A record the structured store holds without its point in semantic memory: drift.
        async with stack.backend.engine.begin() as connection:
            now = datetime.now(UTC)
            await connection.execute(
                collected_records.insert().values(
                    collection="things",
                    record_key="c3",
                    content_hash="0" * 64,
                    data={"id": "c3"},
                    source="test",
                    vector_pending=False,
                    created_at=now,
                    updated_at=now,
                )
            )
        page = (await alice.get("/collections")).text
        row = page.split('data-collection="things"')[1].split("</tr>")[0]
        assert 'class="drift"' in page.split('data-collection="things"')[1][:40]
        assert "+1" in row and "drift" in row

    async with signed_in(stack, TOKENS["bob"]) as bob:
        assert 'data-collection="things"' not in (await bob.get("/collections")).text
        other = await bob.get("/collections/things/search", params={"q": "whale"})
        assert other.status_code == 404 and "Blue whale" not in other.text


async def test_the_graph_playground_dispatches_as_the_user_and_shows_the_heartbeat(
    shared_stack: Stack,
) -> None:
    async with signed_in(shared_stack, TOKENS["alice"]) as alice:
        page = await alice.get("/graph")
        assert page.status_code == 200
        assert 'data-field="graph-status">healthy' in page.text
        assert 'hx-get="/graph/heartbeat"' in page.text
        beat = await alice.get("/graph/heartbeat")
        assert re.search(r'data-field="heartbeat-count">\d+<', beat.text)
        csrf = session_csrf(page.text)
        answer = await alice.post(
            "/graph",
            data={"csrf_token": csrf, "query": "search for whales", "entities": "a1\n\nb2\n"},
        )
        assert answer.status_code == 200, answer.text[:2000]
        assert 'data-field="route"><code>' in answer.text
        assert re.search(r'data-field="confidence">\d\.\d{3}<', answer.text)
        shown = html.unescape(answer.text.split('id="dispatch-answer"')[1])
        assert '"id": "a1"' in shown and '"id": "b2"' in shown  # the entities, as objects
        many = "\n".join(f"e{i}" for i in range(5000))
        refused = await alice.post(
            "/graph", data={"csrf_token": csrf, "query": "q", "entities": many}
        )
        assert refused.status_code == 422 and "TOO_MANY_ENTITIES" in refused.text
        nul = await alice.post("/graph", data={"csrf_token": csrf, "query": "a\x00b"})
        assert nul.status_code == 422 and "UNSAFE_INPUT" in nul.text
        stale = await alice.post("/graph", data={"csrf_token": "nope", "query": "q"})
        assert stale.status_code == 403
