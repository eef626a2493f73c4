"""The console's Evidence pages, part two: thumbnails relayed from the edge, the offline map of
geotagged packs, and the upload form, over HTTP and in Chromium."""

from __future__ import annotations

import io
import re
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


async def test_the_map_plots_geotagged_packs_with_links_and_no_tiles(edge_stack: Stack) -> None:
    paris = await upload(edge_stack, "alice", "paris.jpg", samples.jpeg_with_gps(48.8584, 2.2945))
    lyon = await upload(
        edge_stack, "alice", "lyon.png", samples.png(4, 4), metadata={"lat": 45.76, "lon": 4.84}
    )
    await upload(edge_stack, "alice", "nowhere.png", samples.png(5, 4))
    bobs = await upload(edge_stack, "bob", "rome.jpg", samples.jpeg_with_gps(41.9, 12.5))
    async with signed_in(edge_stack, TOKENS["alice"]) as alice:
        shown = await alice.get("/evidence/map")
        assert shown.status_code == 200, shown.text
        html = shown.text
        assert "2 of the 3 newest matching packs carry a position" in html
        assert f'href="/evidence/{paris}" aria-label="paris.jpg' in html
        assert f'href="/evidence/{lyon}" aria-label="lyon.png' in html
        assert bobs not in html and "rome.jpg" not in html
        assert "48.86° N" in html and "2.29° E" in html  # the point's accessible label
        assert "° N</text>" in html and "° E</text>" in html  # graticule labels
        # Paris is north of Lyon: drawn higher (smaller y).
        cy = dict(
            re.findall(
                r'data-pack="([^"]+)"><title>[^<]*</title><circle cx="[^"]+" cy="([^"]+)"', html
            )
        )
        assert float(cy[paris]) < float(cy[lyon])
        assert "<script" not in html.split("<svg", 1)[1].split("</svg>", 1)[0]
        assert "http" not in html.split("<svg", 1)[1].split("</svg>", 1)[0].replace(
            'xmlns="http://www.w3.org/2000/svg"', ""
        )  # no tiles, nothing fetched
        only_png = await alice.get("/evidence/map", params={"correlation_id": "none-such"})
        assert "None of the 0 newest matching packs carries a position" in only_png.text
        bad = await alice.get("/evidence/map", params={"type": "nonesuch"})
        assert bad.status_code == 404 and "UNKNOWN_MEDIA_TYPE" in bad.text
