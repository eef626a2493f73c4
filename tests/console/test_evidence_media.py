"""The console's Evidence pages, part two: thumbnails relayed from the edge, the offline map of
geotagged packs, and the upload form, over HTTP and in Chromium."""

from __future__ import annotations

import io
import re
from importlib import resources

import pytest
from PIL import Image

from tests.console.conftest import TOKENS, Stack, credential_of
from tests.console.test_evidence import edge_stack as edge_stack  # the fixture
from tests.console.test_evidence import pack_ids, upload
from tests.console.test_pages import signed_in
from tests.edge import samples

# The imported stack is the module's (see test_evidence.py): each test uploads as a user of its
# own, whose lists hold only that test's packs.
pytestmark = pytest.mark.asyncio(loop_scope="module")


def real_png() -> bytes:
    """ezdxf's 256 px application icon: a real PNG shipped by an installed package."""
    return resources.files("ezdxf").joinpath("resources/256x256.png").read_bytes()


async def test_thumbnails_are_shown_from_the_consoles_origin_to_their_readers_only(
    edge_stack: Stack,
) -> None:
    photo = await upload(edge_stack, "thumbs", "site.jpg", samples.jpeg_with_gps())
    report = await upload(edge_stack, "thumbs", "report.pdf", samples.pdf(), route="document")
    async with signed_in(edge_stack, credential_of("thumbs")) as client:
        listed = (await client.get("/evidence")).text
        assert pack_ids(listed) == [report, photo]
        assert f'src="/evidence/{photo}/thumbnail" alt="Thumbnail of site.jpg"' in listed
        assert f"/evidence/{report}/thumbnail" not in listed  # a document has none
        page = (await client.get(f"/evidence/{photo}")).text
        assert f'src="/evidence/{photo}/thumbnail"' in page
        thumbnail = await client.get(f"/evidence/{photo}/thumbnail")
        assert thumbnail.status_code == 200
        assert thumbnail.headers["content-type"] == "image/webp"
        assert thumbnail.headers["x-content-type-options"] == "nosniff"
        assert thumbnail.headers["cache-control"] == "private, max-age=86400"
        image = Image.open(io.BytesIO(thumbnail.content))
        assert (image.format, image.size) == ("WEBP", (256, 192))
        none = await client.get(f"/evidence/{report}/thumbnail")
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
    paris = await upload(edge_stack, "mapper", "paris.jpg", samples.jpeg_with_gps(48.8584, 2.2945))
    lyon = await upload(
        edge_stack, "mapper", "lyon.png", samples.png(4, 4), metadata={"lat": 45.76, "lon": 4.84}
    )
    await upload(edge_stack, "mapper", "nowhere.png", samples.png(5, 4))
    bobs = await upload(edge_stack, "bob", "rome.jpg", samples.jpeg_with_gps(41.9, 12.5))
    async with signed_in(edge_stack, credential_of("mapper")) as client:
        shown = await client.get("/evidence/map")
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
        only_png = await client.get("/evidence/map", params={"correlation_id": "none-such"})
        assert "None of the 0 newest matching packs carries a position" in only_png.text
        bad = await client.get("/evidence/map", params={"type": "nonesuch"})
        assert bad.status_code == 404 and "UNKNOWN_MEDIA_TYPE" in bad.text


def _csrf_and_key(html: str) -> tuple[str, str]:
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', html)
    key = re.search(r'name="idempotency_key" value="([^"]+)"', html)
    assert csrf and key, html
    return csrf.group(1), key.group(1)


def _multipart(parts: list[tuple[str, object]], boundary: str = "b0undary") -> tuple[bytes, str]:
    """A body in the order given (``(name, text)`` or ``(name, (filename, bytes))``)."""
    body = b""
    for name, value in parts:
        if isinstance(value, tuple):
            filename, content = value
            body += (
                (
                    f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                    f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
                ).encode()
                + content
                + b"\r\n"
            )
        else:
            body += (
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
            ).encode()
    body += f"--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


async def test_the_upload_form_streams_a_file_to_the_edge_once(edge_stack: Stack) -> None:
    async with signed_in(edge_stack, credential_of("streamer")) as client:
        form_page = await client.get("/evidence/new")
        assert form_page.status_code == 200
        assert 'enctype="multipart/form-data"' in form_page.text
        csrf, key = _csrf_and_key(form_page.text)
        photo = samples.jpeg_with_gps()
        body, content_type = _multipart(
            [
                ("csrf_token", csrf),
                ("idempotency_key", key),
                ("media_type", "image"),
                ("metadata", '{"site": "north gate", "latitude": 45.07, "longitude": 7.68}'),
                ("file", ("gate.jpg", photo)),
            ]
        )
        sent = await client.post(
            "/evidence/new", content=body, headers={"Content-Type": content_type}
        )
        assert sent.status_code == 303, sent.text
        target = sent.headers["location"]
        evidence_id = target.rsplit("/", 1)[1]
        # A double submit (the same form again) makes no second pack.
        again = await client.post(
            "/evidence/new", content=body, headers={"Content-Type": content_type}
        )
        assert again.status_code == 303 and again.headers["location"] == target
        assert pack_ids((await client.get("/evidence")).text) == [evidence_id]
        shown = (await client.get(target)).text
        assert "gate.jpg" in shown and "north gate" in shown
        download = await client.get(f"{target}/content")
        assert download.content == photo


async def test_the_upload_form_refuses_before_it_sends(edge_stack: Stack) -> None:
    async with signed_in(edge_stack, credential_of("refused")) as client:
        csrf, key = _csrf_and_key((await client.get("/evidence/new")).text)
        fine = [("csrf_token", csrf), ("idempotency_key", key), ("media_type", "image")]
        png = ("file", ("a.png", samples.png()))
        cases = [
            # The token must come first, and be the session's.
            ([("media_type", "image"), ("csrf_token", csrf), png], 403, "CSRF_FAILED"),
            ([("csrf_token", "forged"), ("media_type", "image"), png], 403, "CSRF_FAILED"),
            ([png], 403, "CSRF_FAILED"),
            ([("csrf_token", csrf + "x" * 300), png], 403, "CSRF_FAILED"),
            ([*fine, ("metadata", '{"x": NaN}'), png], 422, "INVALID_METADATA"),
            ([*fine, ("metadata", "[1]"), png], 422, "INVALID_METADATA"),
            ([*fine, ("metadata", '{"s": "\\ud800"}'), png], 422, "INVALID_METADATA"),
            ([*fine, ("metadata", "x" * 70_000), png], 413, "FIELD_TOO_LARGE"),
            ([*fine[:2], ("media_type", "nonesuch"), png], 422, "VALIDATION_FAILED"),
            ([*fine], 422, "MISSING_FILE"),
            ([*fine, ("file", ("", b""))], 422, "MISSING_FILE"),
            ([*fine, png, ("metadata", "{}")], 422, "VALIDATION_FAILED"),
            ([*fine, ("other", "x"), png], 422, "VALIDATION_FAILED"),
            # The edge's refusal, shown on the form: the bytes are not an image.
            ([*fine, ("file", ("a.png", samples.pdf()))], 415, "UNSUPPORTED_MEDIA_TYPE"),
            ([*fine, ("metadata", '{"latitude": 91}'), png], 422, "INVALID_COORDINATES"),
        ]
        for parts, status, code in cases:
            body, content_type = _multipart(parts)
            answer = await client.post(
                "/evidence/new", content=body, headers={"Content-Type": content_type}
            )
            assert answer.status_code == status, (parts[:4], answer.text[:2000])
            assert code in answer.text, (code, answer.text[:3000])
            assert answer.headers["content-type"].startswith("text/html")
        # URL-encoded and unbounded bodies are refused before they are read.
        plain = await client.post("/evidence/new", data={"csrf_token": csrf})
        assert plain.status_code == 415
        assert pack_ids((await client.get("/evidence")).text) == []


async def test_a_file_past_the_limit_is_cut_off_and_nothing_stored(
    edge_stack: Stack,
) -> None:
    """The console counts the file as it relays it: past the type's limit the request to the edge
    ends mid-body, the edge stores nothing, and the form says why."""
    async with signed_in(edge_stack, credential_of("big-sender")) as client:
        csrf, key = _csrf_and_key((await client.get("/evidence/new")).text)
        big = samples.png() + b"\0" * (50 * 1024 * 1024)  # past the image limit of 50 MiB

        async def chunks():
            head, _ = _multipart(
                [("csrf_token", csrf), ("idempotency_key", key), ("media_type", "image")]
            )
            yield head[: -len(b"--b0undary--\r\n")]
            yield (
                b'--b0undary\r\nContent-Disposition: form-data; name="file"; filename="big.png"'
                b"\r\n\r\n"
            )
            for start in range(0, len(big), 1 << 20):
                yield big[start : start + (1 << 20)]
            yield b"\r\n--b0undary--\r\n"

        answer = await client.post(
            "/evidence/new",
            content=chunks(),
            headers={"Content-Type": "multipart/form-data; boundary=b0undary"},
        )
        assert answer.status_code == 413, answer.text[:2000]
        assert "PAYLOAD_TOO_LARGE" in answer.text and "52,428,800" in answer.text
        assert pack_ids((await client.get("/evidence")).text) == []


async def test_broken_upload_bodies_are_refused_and_store_nothing(edge_stack: Stack) -> None:
    async with signed_in(edge_stack, credential_of("breaker")) as client:
        csrf, key = _csrf_and_key((await client.get("/evidence/new")).text)
        whole, content_type = _multipart(
            [
                ("csrf_token", csrf),
                ("idempotency_key", key),
                ("media_type", "image"),
                ("file", ("café «1» %22x%22.png", samples.png())),  # as a browser escapes it
            ]
        )
        cut = whole[: -len(b"\r\n--b0undary--\r\n")]  # the file sent, the body never closed
        cases = [
            (cut, content_type, 400, "TRUNCATED_UPLOAD"),
            (b"\x00garbage" * 100, content_type, 400, "MALFORMED_MULTIPART"),
            (whole, "multipart/form-data", 415, "UNSUPPORTED_MEDIA_TYPE"),
        ]
        for body, sent_type, status, code in cases:
            answer = await client.post(
                "/evidence/new", content=body, headers={"Content-Type": sent_type}
            )
            assert answer.status_code == status, (code, answer.text[:2000])
            assert code in answer.text, answer.text[answer.text.find("problem-title") :][:600]
        assert pack_ids((await client.get("/evidence")).text) == []
        # The non-ASCII name is carried on as sent, and the upload works.
        sent = await client.post(
            "/evidence/new", content=whole, headers={"Content-Type": content_type}
        )
        assert sent.status_code == 303, sent.text[:2000]
        assert len(pack_ids((await client.get("/evidence")).text)) == 1
        assert "café «1»" in (await client.get(sent.headers["location"])).text
