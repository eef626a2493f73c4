"""The dead-letters page: an operator sees what the pipeline set aside and replays or discards
it through the console; a user is refused by the services."""

from __future__ import annotations

import re
from typing import Any

from tests.chromium import chromium
from tests.console.conftest import TOKENS, Stack
from tests.console.test_in_chromium import sign_in
from tests.console.test_pages import session_csrf, signed_in
from tests.platform.test_dead_letter_routes import (
    CHANNEL,
    _audit_events,
    _dead_letter,
    _quarantined_outbox_event,
)


async def test_an_operator_resolves_dead_letters_and_a_user_cannot_see_them(stack: Stack) -> None:
    rejected = await _dead_letter(stack.backend.bus, {"order": "seven"})
    quarantined = await _quarantined_outbox_event(stack.backend)

    async with signed_in(stack, TOKENS["alice"]) as alice:
        refused = await alice.get("/dead-letters")
        assert refused.status_code == 403 and "Only operators" in refused.text
        assert "seven" not in refused.text

    async with signed_in(stack, TOKENS["olga"]) as olga:
        listed = await olga.get("/dead-letters")
        assert listed.status_code == 200
        # Four services share this store and bus: each row is shown once, not four times.
        assert listed.text.count(f'data-outbox="{quarantined}"') == 1
        entries = re.findall(rf'data-entry="{re.escape(CHANNEL)}/([0-9-]+)"', listed.text)
        assert len(entries) == 1 and "seven" in listed.text
        csrf = session_csrf(listed.text)

        stale = await olga.post(
            f"/dead-letters/gateway/bus/{CHANNEL}/{entries[0]}/replay", data={"csrf_token": "old"}
        )
        assert stale.status_code == 403 and "CSRF_FAILED" in stale.text
        replayed = await olga.post(
            f"/dead-letters/gateway/bus/{CHANNEL}/{entries[0]}/replay", data={"csrf_token": csrf}
        )
        assert replayed.status_code == 303
        after = await olga.get(replayed.headers["location"])
        assert "Replayed." in after.text and "seven" not in after.text
        assert (await stack.backend.bus.read(CHANNEL))[-1].event_id == rejected.event_id

        gone = await olga.post(
            f"/dead-letters/edge/outbox/{quarantined}/discard", data={"csrf_token": csrf}
        )
        assert gone.status_code == 303
        assert f'data-outbox="{quarantined}"' not in (await olga.get("/dead-letters")).text
        missing = await olga.post(
            f"/dead-letters/edge/outbox/{quarantined}/discard", data={"csrf_token": csrf}
        )
        assert missing.status_code == 404  # the service's answer, as a page
        unknown = await olga.post(
            f"/dead-letters/nowhere/outbox/{quarantined}/discard", data={"csrf_token": csrf}
        )
        assert unknown.status_code == 422
    audit = await _audit_events(stack.backend)
    assert {(row["action"], row["kind"], row["by"]) for row in audit} == {
        ("replay", "bus", "olga"),
        ("discard", "outbox", "olga"),
    }


async def test_discard_and_replay_from_the_browser(stack: Stack) -> None:
    rejected = await _dead_letter(stack.backend.bus, {"order": 8, "customer": None})
    quarantined = await _quarantined_outbox_event(stack.backend)
    async with chromium() as browser:
        olga = await sign_in(browser, stack.console, "olga")
        page: Any = olga.page
        await page.get_by_role("link", name="Dead letters").click()
        await olga.shot("dead-letters")
        await page.get_by_role("button", name=f"Discard outbox event {quarantined}").click()
        await page.get_by_role("status").wait_for()
        assert await page.get_by_role("status").inner_text() == "Discarded."
        assert await page.locator(f"[data-outbox='{quarantined}']").count() == 0
        entry = page.locator("[data-entry]")
        assert await entry.count() == 1  # the bus entry is still there
        await entry.get_by_role("button", name=re.compile("^Replay entry")).click()
        await page.get_by_role("status").wait_for()
        assert await page.get_by_role("status").inner_text() == "Replayed."
        assert await page.locator("[data-entry]").count() == 0
        replayed = (await stack.backend.bus.read(CHANNEL))[-1]
        assert replayed.event_id == rejected.event_id and replayed.payload["order"] == 8
        assert olga.failures == []
