"""The console's Evidence pages over HTTP: who sees which packs, a pack's page, and its download,
which is relayed from the edge as the user and never shown as a page."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from conclave.console.upstream import MAX_ANSWER_BYTES
from tests.chromium import chromium
from tests.conftest import Backend, eventually
from tests.console.conftest import TOKENS, Stack, auth, open_stack
from tests.console.test_pages import signed_in
from tests.edge import samples
from tests.edge.conftest import form

# The tests find their packs by id, or as a user of their own: one gateway, edge and console
# serve a module's tests, on its event loop. The test of who sees what keeps a stack of its own.
pytestmark = pytest.mark.asyncio(loop_scope="module")

# How long the browser waits for a page or an element: longer than the stack's upstream budget.
WAIT_MS = 90_000


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def edge_stack(
    shared_embedded: Backend, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """The gateway (for sign-in), the edge and the console, shared by the module's tests."""
    data_dir = tmp_path_factory.mktemp("edge-stack")
    async with open_stack(shared_embedded, data_dir, services=("gateway", "edge")) as running:
        yield running


@pytest.fixture
async def own_edge_stack(embedded: Backend, tmp_path: Path) -> AsyncIterator[Stack]:
    """The gateway, the edge and the console, for one test."""
    async with open_stack(embedded, tmp_path, services=("gateway", "edge")) as running:
        yield running


async def upload(
    stack: Stack, user: str, name: str, content: bytes, route: str = "image", **fields: Any
) -> str:
    """``user`` uploads one file to the edge's API; the new pack's id."""
    async with httpx.AsyncClient(base_url=stack.urls["edge"], timeout=60) as client:
        answer = await client.post(
            f"/api/edge-intake/{route}", **form((name, content), **fields), headers=auth(user)
        )
    assert answer.status_code == 200, answer.text
    [evidence_id] = answer.json()["evidence_ids"]
    return str(evidence_id)


def pack_ids(html: str) -> list[str]:
    """The packs an Evidence page lists, in order."""
    return re.findall(r'data-pack="([^"]+)"', html)


# A fresh stack: the operator's list is checked to be exactly these two packs.
@pytest.mark.asyncio(loop_scope="function")
async def test_a_user_sees_only_their_own_evidence_and_an_operator_everyones(
    own_edge_stack: Stack,
) -> None:
    alices = await upload(
        own_edge_stack, "alice", "dam.png", samples.png(16, 9), correlation_id="c-1"
    )
    bobs = await upload(own_edge_stack, "bob", "bridge.png", samples.png(9, 16))

    async with signed_in(own_edge_stack, TOKENS["alice"]) as alice:
        listed = await alice.get("/evidence")
        assert listed.status_code == 200
        assert pack_ids(listed.text) == [alices]
        assert "dam.png" in listed.text and "bridge.png" not in listed.text
        assert 'name="user_id"' not in listed.text  # no one else's to ask for
        # Naming another user is dropped for a non-operator: still only her own.
        assert pack_ids((await alice.get("/evidence", params={"user_id": "bob"})).text) == [alices]
        by_correlation = await alice.get("/evidence", params={"correlation_id": "c-1"})
        assert pack_ids(by_correlation.text) == [alices]
        assert pack_ids((await alice.get("/evidence", params={"type": "audio"})).text) == []
        # Bob's pack is not there for her, whichever way she asks.
        for path in (f"/evidence/{bobs}", f"/evidence/{bobs}/content"):
            refused = await alice.get(path)
            assert refused.status_code == 404, path
            assert "EVIDENCE_NOT_FOUND" in refused.text and "bridge.png" not in refused.text

    async with signed_in(own_edge_stack, TOKENS["olga"]) as olga:
        everyone = await olga.get("/evidence")
        assert pack_ids(everyone.text) == [bobs, alices]
        assert 'name="user_id"' in everyone.text
        only_bob = await olga.get("/evidence", params={"user_id": "bob"})
        assert pack_ids(only_bob.text) == [bobs]
        assert (await olga.get(f"/evidence/{alices}")).status_code == 200


async def test_a_packs_page_shows_what_was_sent_extracted_and_verified(edge_stack: Stack) -> None:
    evidence_id = await upload(
        edge_stack,
        "alice",
        "site.jpg",
        samples.jpeg_with_gps(),
        metadata={"site": "upper dam <north>"},
    )
    async with signed_in(edge_stack, TOKENS["alice"]) as alice:

        async def verified() -> str | None:
            shown = await alice.get(f"/evidence/{evidence_id}")
            assert shown.status_code == 200, shown.text
            return shown.text if "<strong>Verified</strong>" in shown.text else None

        # The log signs a new pack's leaf within about a second.
        html = await eventually(verified, timeout=60)
        assert "site.jpg" in html and "Evidence Pack " + evidence_id in html
        assert "upper dam &lt;north&gt;" in html  # the client's metadata, escaped
        assert "48.858" in html  # the latitude extracted from the photo's EXIF
        assert "of the log <code>packs</code>" in html
        assert f'href="/evidence/{evidence_id}/content"' in html
        assert "Uploaded by</dt><dd>alice" in html


async def test_the_original_file_is_a_download_never_a_page(edge_stack: Stack) -> None:
    """An upload named like a web page is saved, not shown: a generic type, an attachment, a
    policy that lets it run nothing."""
    content = samples.png(20, 20)
    evidence_id = await upload(edge_stack, "alice", "café;«1» x.html", content)
    async with signed_in(edge_stack, TOKENS["alice"]) as alice:
        download = await alice.get(f"/evidence/{evidence_id}/content")
        assert download.status_code == 200
        assert download.content == content
        assert download.headers["content-type"] == "application/octet-stream"
        assert download.headers["x-content-type-options"] == "nosniff"
        assert download.headers["content-length"] == str(len(content))
        assert "sandbox" in download.headers["content-security-policy"]
        disposition = download.headers["content-disposition"]
        # A plain name no header parser can misread, and the exact one (RFC 8187).
        assert disposition == (
            'attachment; filename="cafe_1 x.html"; '
            "filename*=UTF-8''caf%C3%A9%3B%C2%AB1%C2%BB%20x.html"
        )


async def test_a_download_larger_than_any_page_is_relayed_whole(edge_stack: Stack) -> None:
    """The bytes are relayed as they arrive: a file beyond what the console would ever read into
    memory for a page (16 MiB) still downloads, byte for byte."""
    content = samples.wav(seconds=(MAX_ANSWER_BYTES + 1_000_000) / 16_000)
    assert len(content) > MAX_ANSWER_BYTES
    evidence_id = await upload(edge_stack, "alice", "long.wav", content, route="audio")
    async with signed_in(edge_stack, TOKENS["alice"]) as alice:
        async with alice.stream("GET", f"/evidence/{evidence_id}/content") as download:
            assert download.status_code == 200
            received = bytearray()
            chunks = 0
            async for chunk in download.aiter_bytes():
                received += chunk
                chunks += 1
        assert bytes(received) == content
        assert chunks > 1


async def test_bad_evidence_requests_are_problem_pages(edge_stack: Stack) -> None:
    await upload(edge_stack, "alice", "a.png", samples.png())
    async with signed_in(edge_stack, TOKENS["alice"]) as alice:
        for sneaky in ("..%2Fpipeline", "%2E%2E", "x%2Fcontent", "x%3Fa%3Db"):
            for suffix in ("", "/content"):
                answer = await alice.get(f"/evidence/{sneaky}{suffix}")
                assert answer.status_code in (400, 404), (sneaky, answer.status_code)
                assert "ingestion_rate" not in answer.text  # the pipeline is not reached
                assert answer.headers["content-type"].startswith("text/html")
        cases = [
            ({"type": "nonesuch"}, 404, "UNKNOWN_MEDIA_TYPE"),
            ({"since": "yesterday"}, 422, "VALIDATION_FAILED"),
            ({"cursor": "not a cursor"}, 400, "INVALID_CURSOR"),
            ({"device_id": "cam\x00"}, 422, "UNSAFE_INPUT"),
            ({"device_id": "d" * 257}, 422, "VALIDATION_FAILED"),
        ]
        for params, status, code in cases:
            answer = await alice.get("/evidence", params=params)
            assert answer.status_code == status, (params, answer.text)
            assert answer.headers["content-type"].startswith("text/html")
            assert code in answer.text, params
            assert "Traceback" not in answer.text


async def test_in_chromium_a_pack_is_found_opened_and_its_file_saved(edge_stack: Stack) -> None:
    """The way a person does it: sign in, find the pack in the list by keyboard-free clicks,
    open it, press Download; the browser saves the file and stays on the pack's page, and the
    pages break none of the console's content rules."""
    content = samples.png(24, 12)
    evidence_id = await upload(edge_stack, "alice", "page.html", content)
    async with chromium() as browser:
        context = await browser.new_context(accept_downloads=True)
        # Past the stack's upstream budget: a page the console is slow to build on a loaded
        # machine is waited for, not taken for a missing one.
        context.set_default_timeout(WAIT_MS)
        page = await context.new_page()
        refused: list[str] = []
        page.on("console", lambda message: refused.append(message.text))
        await page.goto(f"{edge_stack.console}/signin?next=/evidence")
        await page.get_by_label("Bearer token or JWT").fill(TOKENS["alice"])
        await page.get_by_role("button", name="Sign in").click()
        await page.wait_for_url(f"{edge_stack.console}/evidence")
        row = page.locator(f'tr[data-pack="{evidence_id}"]')
        if not await row.count():  # the page is loaded: the row is there or never will be
            shown = await page.locator("body").inner_text()
            pytest.fail(f"pack {evidence_id} is not listed on /evidence, which shows:\n{shown}")
        assert "page.html" in await row.inner_text()
        await row.get_by_role("link").click()
        await page.wait_for_url(f"{edge_stack.console}/evidence/{evidence_id}")
        assert await page.get_by_role("heading", level=1).inner_text() == (
            f"page.html Evidence Pack {evidence_id}"
        )
        async with page.expect_download() as waiting:
            await page.get_by_role("link", name="Download the original file").click()
        download = await waiting.value
        assert download.suggested_filename == "page.html"
        saved = await download.path()
        assert await asyncio.to_thread(Path(saved).read_bytes) == content
        assert page.url == f"{edge_stack.console}/evidence/{evidence_id}"
        assert not [text for text in refused if "Content Security Policy" in text], refused
        await context.close()
