"""Evidence in real Chromium: alice uploads a real image through the console's form, lands on its
page and sees its thumbnail (loaded), its metadata and "Verified"; finds it on the map, placed by
the position she sent; bob sees none of it. With ``CONCLAVE_CONSOLE_SCREENSHOTS`` set, the
screens are saved (``scripts/console-screenshots``)."""

from __future__ import annotations

import re

import pytest

from tests.chromium import chromium
from tests.console.conftest import TOKENS, Stack
from tests.console.test_evidence import edge_stack as edge_stack  # the fixture
from tests.console.test_evidence_media import real_png
from tests.console.test_in_chromium import Watched

# The imported stack is module-scoped: it and the test share the module's event loop.
pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _signed_in(browser, console: str, user: str, width: int = 1280) -> Watched:
    context = await browser.new_context(viewport={"width": width, "height": 900})
    watched = Watched(await context.new_page())
    await watched.page.goto(f"{console}/signin?next=/evidence")
    await watched.page.get_by_label("Bearer token or JWT").fill(TOKENS[user])
    await watched.page.get_by_role("button", name="Sign in").click()
    await watched.page.wait_for_url(f"{console}/evidence")
    return watched


async def _thumbnail_loaded(image) -> bool:
    return bool(await image.evaluate("(img) => img.complete && img.naturalWidth > 0"))


async def test_in_chromium_upload_an_image_see_its_thumbnail_map_and_verification(
    edge_stack: Stack,
) -> None:
    from playwright.async_api import expect

    console = edge_stack.console
    async with chromium() as browser:
        watched = await _signed_in(browser, console, "alice")
        page = watched.page
        await page.get_by_role("link", name="Upload evidence").click()
        await page.wait_for_url(f"{console}/evidence/new")
        await page.get_by_label("Media type").select_option("image")
        await page.get_by_label("Metadata (optional JSON object)").fill(
            '{"site": "north gate", "latitude": 45.07, "longitude": 7.68}'
        )
        await page.get_by_label("File").set_input_files(
            {"name": "gate-icon.png", "mimeType": "image/png", "buffer": real_png()}
        )
        await watched.shot("evidence-upload")
        await page.get_by_role("button", name="Upload").click()
        await page.wait_for_url(re.compile(re.escape(console) + r"/evidence/[0-9a-f-]{36}$"))
        evidence_id = page.url.rsplit("/", 1)[1]
        await expect(page.get_by_role("heading", level=1)).to_contain_text("gate-icon.png")
        thumbnail = page.get_by_role("img", name="Thumbnail of gate-icon.png")
        await expect(thumbnail).to_be_visible()
        assert await _thumbnail_loaded(thumbnail)
        assert await thumbnail.evaluate("(img) => img.naturalWidth") == 256
        await expect(page.locator("section[aria-labelledby=metadata-title]")).to_contain_text(
            "north gate"
        )
        await expect(page.locator("section[aria-labelledby=extracted-title]")).to_contain_text(
            '"width": 256'
        )
        # The log signs a new pack within about a second: reload until it is verified.
        verification = page.locator("section.verification")
        for _ in range(30):
            if "Verified" in await verification.inner_text():
                break
            await page.wait_for_timeout(500)
            await page.reload()
        await expect(verification.locator("strong")).to_have_text("Verified")
        await watched.shot("evidence-pack")

        await page.get_by_role("link", name="← Evidence").click()
        row = page.locator(f'tr[data-pack="{evidence_id}"]')
        listed = row.get_by_role("img", name="Thumbnail of gate-icon.png")
        await expect(listed).to_be_visible()
        assert await _thumbnail_loaded(listed)
        await watched.shot("evidence")

        await page.get_by_role("link", name="Map of geotagged packs").click()
        await page.wait_for_url(f"{console}/evidence/map?")
        await expect(page.locator("#map-summary")).to_contain_text(
            "1 of the 1 newest matching packs carry a position"
        )
        point = page.locator(f'svg a[data-pack="{evidence_id}"]')
        assert (await point.get_attribute("aria-label")).startswith("gate-icon.png")
        assert "45.07° N 7.68° E" in await point.get_attribute("aria-label")
        await watched.shot("evidence-map")
        # In a narrow window the map shrinks with the page; its points stay links.
        await page.set_viewport_size({"width": 420, "height": 900})
        box = await page.locator(".evidence-map svg").bounding_box()
        assert box is not None and box["width"] <= 420
        assert await page.evaluate("document.documentElement.scrollWidth") <= 420
        await expect(point).to_be_visible()
        await page.set_viewport_size({"width": 1280, "height": 900})
        # A point is a link a keyboard reaches and follows.
        await point.focus()
        assert await point.evaluate("(link) => document.activeElement === link")
        await page.keyboard.press("Enter")
        await page.wait_for_url(f"{console}/evidence/{evidence_id}")
        assert not watched.failures, watched.failures

        # Bob sees none of it: not the page, not the thumbnail, not a point on his map.
        bob = await _signed_in(browser, console, "bob")
        answer = await bob.page.goto(f"{console}/evidence/{evidence_id}")
        assert answer is not None and answer.status == 404
        await expect(bob.page.locator("main")).to_contain_text("EVIDENCE_NOT_FOUND")
        assert "gate-icon.png" not in await bob.page.content()
        refused = await bob.page.request.get(f"{console}/evidence/{evidence_id}/thumbnail")
        assert refused.status == 404
        await bob.page.goto(f"{console}/evidence/map")
        await expect(bob.page.locator("main")).to_contain_text("None of the 0 newest")
