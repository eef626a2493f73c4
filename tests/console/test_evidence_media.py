"""The console's Evidence pages, part two: thumbnails relayed from the edge, the offline map of
geotagged packs, and the upload form, over HTTP and in Chromium."""

from __future__ import annotations

import io
from importlib import resources

from PIL import Image

from tests.console.conftest import TOKENS, Stack
from tests.console.test_evidence import edge_stack as edge_stack  # the fixture
from tests.console.test_evidence import pack_ids, upload
from tests.console.test_pages import signed_in
from tests.edge import samples


def real_png() -> bytes:
    """ezdxf's 256 px application icon: a real PNG shipped by an installed package."""
    return resources.files("ezdxf").joinpath("resources/256x256.png").read_bytes()


async def test_thumbnails_are_shown_from_the_consoles_origin_to_their_readers_only(
    edge_stack: Stack,
) -> None:
    photo = await upload(edge_stack, "alice", "site.jpg", samples.jpeg_with_gps())
    report = await upload(edge_stack, "alice", "report.pdf", samples.pdf(), route="document")
    async with signed_in(edge_stack, TOKENS["alice"]) as alice:
        listed = (await alice.get("/evidence")).text
        assert pack_ids(listed) == [report, photo]
        assert f'src="/evidence/{photo}/thumbnail" alt="Thumbnail of site.jpg"' in listed
        assert f"/evidence/{report}/thumbnail" not in listed  # a document has none
        page = (await alice.get(f"/evidence/{photo}")).text
        assert f'src="/evidence/{photo}/thumbnail"' in page
        thumbnail = await alice.get(f"/evidence/{photo}/thumbnail")
        assert thumbnail.status_code == 200
        assert thumbnail.headers["content-type"] == "image/webp"
        assert thumbnail.headers["x-content-type-options"] == "nosniff"
        assert thumbnail.headers["cache-control"] == "private, max-age=86400"
        image = Image.open(io.BytesIO(thumbnail.content))
        assert (image.format, image.size) == ("WEBP", (256, 192))
        none = await alice.get(f"/evidence/{report}/thumbnail")
        assert none.status_code == 404
        assert "NO_THUMBNAIL" in none.text and none.headers["content-type"].startswith("text/html")
    async with signed_in(edge_stack, TOKENS["bob"]) as bob:
        refused = await bob.get(f"/evidence/{photo}/thumbnail")
        assert refused.status_code == 404
        assert "EVIDENCE_NOT_FOUND" in refused.text
        assert refused.headers["content-type"].startswith("text/html")
    async with signed_in(edge_stack, TOKENS["olga"]) as olga:
        icon = await upload(edge_stack, "bob", "icon.png", real_png())
        shown = await olga.get(f"/evidence/{icon}/thumbnail")
        assert Image.open(io.BytesIO(shown.content)).size == (256, 256)
