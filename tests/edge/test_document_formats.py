"""Documents crafted to attack or confuse the document agent are refused or described honestly.

Real documents are covered by the corpus (tests/edge/corpus/document.toml); these are the files
no public archive carries: bombs, lies and password-protected structures built to order.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

from pypdf import PdfWriter

from tests.conftest import Backend
from tests.edge import samples
from tests.edge.conftest import upload_facts

_FREE, _END, _FAT, _NONE = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD, 0xFFFFFFFF


def _compound_file(streams: list[str]) -> bytes:
    """A minimal OLE2 compound file (version 3, 512-byte sectors) holding empty ``streams``."""
    header = bytearray(512)
    header[0:8] = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
    struct.pack_into("<HHHHH", header, 24, 0x3E, 3, 0xFFFE, 9, 6)
    # One FAT sector (0), the directory in sector 1, no mini FAT, no DIFAT sectors.
    struct.pack_into("<IIIIIIIII", header, 40, 0, 1, 1, 0, 0x1000, _END, 0, _END, 0)
    struct.pack_into("<109I", header, 76, 0, *[_FREE] * 108)
    fat = struct.pack("<128I", _FAT, _END, *[_FREE] * 126)

    def entry(name: str, kind: int, child: int, right: int) -> bytes:
        encoded = name.encode("utf-16-le")
        raw = bytearray(128)
        raw[: len(encoded)] = encoded
        struct.pack_into("<HBBIII", raw, 64, len(encoded) + 2, kind, 1, _NONE, right, child)
        struct.pack_into("<II", raw, 116, _END, 0)
        return bytes(raw)

    entries = [entry("Root Entry", 5, 1 if streams else _NONE, _NONE)]
    for index, name in enumerate(streams, start=1):
        entries.append(entry(name, 2, _NONE, index + 1 if index < len(streams) else _NONE))
    unused = entry("", 0, _NONE, _NONE)
    directory = b"".join(entries + [unused] * (4 - len(entries)))
    return bytes(header) + fat + directory


def _package(parts: dict[str, bytes], *, stored_first: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        if stored_first:
            archive.writestr(stored_first, parts.pop(stored_first), zipfile.ZIP_STORED)
        for name, data in parts.items():
            archive.writestr(name, data)
    return buffer.getvalue()


_CONTENT_TYPES = (
    b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
    b'content-types"><Override PartName="/word/document.xml" ContentType="application/'
    b'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
)
_RELS = (
    b'<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/'
    b'relationships"><Relationship Id="r1" Type="http://schemas.openxmlformats.org/'
    b'officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/>'
    b"</Relationships>"
)
_LAUGHS = (
    b'<?xml version="1.0"?><!DOCTYPE m [<!ENTITY a "aaaaaaaaaa">'
    + b"".join(
        b'<!ENTITY %c "%s">' % (ord("b") + i, b"&%c;" % (ord("a") + i) * 10) for i in range(8)
    )
    + b']><office:document-meta xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
    b' xmlns:dc="http://purl.org/dc/elements/1.1/"><office:meta><dc:title>&i;</dc:title>'
    b"</office:meta></office:document-meta>"
)


async def test_an_entity_bomb_in_document_metadata_is_refused_not_expanded(
    backend: Backend, tmp_path
):
    odt = _package(
        {"mimetype": b"application/vnd.oasis.opendocument.text", "meta.xml": _LAUGHS},
        stored_first="mimetype",
    )
    status, body = await upload_facts(backend, tmp_path, "document", "laughs.odt", odt)
    assert (status, body["code"]) == (422, "CORRUPT_MEDIA")


async def test_a_zip_bomb_body_is_refused_before_it_is_unpacked(backend: Backend, tmp_path):
    # 80 MiB of one repeated byte deflates to about 80 KiB: the declared size gives it away.
    bomb = _package(
        {
            "[Content_Types].xml": _CONTENT_TYPES,
            "_rels/.rels": _RELS,
            "word/document.xml": b"<w:document>" + b" " * (80 * 1024**2) + b"</w:document>",
        }
    )
    assert len(bomb) < 1024**2
    status, body = await upload_facts(backend, tmp_path, "document", "bomb.docx", bomb)
    assert (status, body["code"]) == (422, "CORRUPT_MEDIA")
    assert "unpacks to more than" in body["detail"]


async def test_a_pdf_that_needs_a_password_still_tells_its_page_count(backend: Backend, tmp_path):
    writer = PdfWriter(clone_from=io.BytesIO(samples.pdf(pages=3, text="Sealed report")))
    writer.encrypt(user_password="field-secret", owner_password="office", algorithm="AES-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    status, facts = await upload_facts(
        backend, tmp_path, "document", "sealed.pdf", buffer.getvalue()
    )
    assert status == 200, facts
    assert facts["encrypted"] is facts["password_required"] is True
    assert facts["pages"] == 3
    assert facts["text_length"] is None


def _pdf_of(objects: list[bytes]) -> bytes:
    """A PDF made of ``objects`` (numbered from 1, the first the catalog) with a true xref."""
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    trailer = b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
    return out + trailer % (len(objects) + 1, xref)


async def test_a_pdf_page_tree_that_loops_is_refused(backend: Backend, tmp_path):
    looped = _pdf_of(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Pages /Kids [2 0 R] /Parent 2 0 R /Count 1 >>",
        ]
    )
    status, body = await upload_facts(backend, tmp_path, "document", "loop.pdf", looped)
    assert (status, body["code"]) == (422, "CORRUPT_MEDIA")


async def test_a_compound_file_that_is_no_office_document_is_refused(backend: Backend, tmp_path):
    status, body = await upload_facts(
        backend, tmp_path, "document", "image.fpx", _compound_file(["Contents"])
    )
    assert (status, body["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")


async def test_a_word_file_with_a_damaged_summary_is_still_identified(backend: Backend, tmp_path):
    broken = _compound_file(["WordDocument", "\x05SummaryInformation"])
    status, facts = await upload_facts(backend, tmp_path, "document", "memo.doc", broken)
    assert status == 200, facts
    assert facts["type"] == "doc"
    assert facts.get("title") is None


_ODF_TEXT = b"application/vnd.oasis.opendocument.text"


async def test_a_package_part_nested_past_the_depth_cap_is_refused(backend: Backend, tmp_path):
    # A few KiB of nested tags: a manifest whose file entries nest 100,000 deep was searched entry
    # by entry (quadratic), and core properties nesting 2 million deep took 680 MB to build.
    nested = b"<manifest>" + b"<file-entry>" * 100_000 + b"</file-entry>" * 100_000 + b"</manifest>"
    odt = _package(
        {"mimetype": _ODF_TEXT, "META-INF/manifest.xml": nested}, stored_first="mimetype"
    )
    status, body = await upload_facts(backend, tmp_path, "document", "nest.odt", odt)
    assert (status, body["code"]) == (422, "CORRUPT_MEDIA")
    assert "META-INF/manifest.xml nests deeper than" in body["detail"]

    docx = _package(
        {
            "[Content_Types].xml": _CONTENT_TYPES,
            "_rels/.rels": _RELS,
            "word/document.xml": b"<document/>",
            "docProps/core.xml": b"<a>" * 2_000_000 + b"</a>" * 2_000_000,
        }
    )
    status, body = await upload_facts(backend, tmp_path, "document", "deep.docx", docx)
    assert (status, body["code"]) == (422, "CORRUPT_MEDIA")
    assert "docProps/core.xml nests deeper than" in body["detail"]


async def test_an_encrypted_odf_part_is_told_by_its_manifest_entry(backend: Backend, tmp_path):
    manifest = (
        b'<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0">'
        b'<manifest:file-entry manifest:full-path="/" manifest:media-type="'
        + _ODF_TEXT
        + b'"/><manifest:file-entry manifest:full-path="meta.xml" manifest:media-type="text/xml">'
        b'<manifest:encryption-data manifest:checksum-type="SHA1/1K" manifest:checksum="AA==">'
        b'<manifest:algorithm manifest:algorithm-name="Blowfish CFB"/></manifest:encryption-data>'
        b"</manifest:file-entry></manifest:manifest>"
    )
    odt = _package(
        {"mimetype": _ODF_TEXT, "META-INF/manifest.xml": manifest, "meta.xml": b"\x9c\x01"},
        stored_first="mimetype",
    )
    status, facts = await upload_facts(backend, tmp_path, "document", "sealed.odt", odt)
    assert status == 200, facts
    assert (facts["type"], facts["encrypted"]) == ("odt", True)


async def test_package_relationships_and_content_types_are_read_once(backend: Backend, tmp_path):
    # 60,000 relationships that each name a main part, and 2 MB of content types: looking the
    # content types up again for every relationship would take hours.
    relationships = b"".join(
        b'<Relationship Id="r%d" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
        b'relationships/officeDocument" Target="part%d.xml"/>' % (i, i % 3)
        for i in range(60_000)
    )
    content_types = _CONTENT_TYPES.replace(
        b"</Types>", b'<Default Extension="q" ContentType="x"/>' * 50_000 + b"</Types>"
    )
    docx = _package(
        {
            "[Content_Types].xml": content_types,
            "_rels/.rels": _RELS.replace(b"<Relationship ", relationships + b"<Relationship "),
            "part0.xml": b"<x/>",
            "part1.xml": b"<x/>",
            "word/document.xml": b"<document><t>Field notes</t></document>",
        }
    )
    status, facts = await upload_facts(backend, tmp_path, "document", "many.docx", docx)
    assert status == 200, facts
    assert (facts["type"], facts["text_length"]) == ("docx", len("Field notes"))


def _shared_stream_pdf(pages: int, stream: bytes) -> bytes:
    """A PDF of ``pages`` pages all drawing the same Flate content stream in Helvetica."""
    packed = zlib.compress(stream, 9)
    kids = b" ".join(b"%d 0 R" % (5 + i) for i in range(pages))
    return _pdf_of(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(packed), packed),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        ]
        + [
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] /Contents 3 0 R"
            b" /Resources << /Font << /F1 4 0 R >> >> >>"
        ]
        * pages
    )


async def test_pdf_text_extraction_stops_at_its_budget_of_content(backend: Backend, tmp_path):
    # 200 pages draw one 200 KB stream: 40 MB for pypdf to parse, about a minute of work.
    shared = _shared_stream_pdf(200, b"BT /F1 1 Tf (a) Tj ET\n" * 10_000)
    status, facts = await upload_facts(backend, tmp_path, "document", "shared.pdf", shared)
    assert status == 200, facts
    assert facts["pages"] == 200
    assert facts["text_length_complete"] is False
    assert 0 < facts["text_length"] < 200 * 10_000

    status, facts = await upload_facts(
        backend, tmp_path, "document", "short.pdf", _shared_stream_pdf(3, b"BT /F1 1 Tf (ab) Tj ET")
    )
    assert status == 200, facts
    assert (facts["text_length"], facts["text_length_complete"]) == (6, True)


async def test_a_form_drawn_over_and_over_is_charged_to_the_text_budget(backend: Backend, tmp_path):
    # pypdf parses a form again each time it is drawn: 1,000 draws of a 100 KB form.
    form = zlib.compress(b"BT /F1 1 Tf (a) Tj ET\n" * 5_000, 9)
    page = zlib.compress(b"/X0 Do\n" * 1_000, 9)
    pdf = _pdf_of(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] /Contents 4 0 R"
            b" /Resources << /XObject << /X0 5 0 R >> >> >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(page), page),
            b"<< /Type /XObject /Subtype /Form /BBox [0 0 1 1] /Length %d /Filter /FlateDecode"
            b" /Resources << /Font << /F1 6 0 R >> >> >>\nstream\n%s\nendstream"
            % (len(form), form),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        ]
    )
    status, facts = await upload_facts(backend, tmp_path, "document", "forms.pdf", pdf)
    assert status == 200, facts
    assert (facts["pages"], facts["text_length_complete"]) == (1, False)


async def test_a_text_head_in_front_of_other_bytes_is_no_text_document(backend: Backend, tmp_path):
    polyglot = b"Field log, day one.\n" * 400 + _package({"payload.bin": b"\x00" * 64})
    status, body = await upload_facts(backend, tmp_path, "document", "log.txt", polyglot)
    assert (status, body["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")

    latin1 = b"Field log\n" * 1000 + "Relev\u00e9 termin\u00e9\n".encode("latin-1")
    status, body = await upload_facts(backend, tmp_path, "document", "log.txt", latin1)
    assert (status, body["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")

    # A character split across the reader's 1 MiB chunks is still one character.
    text = b"a" * (1024**2 - 1) + "\u00e9\n".encode()
    status, facts = await upload_facts(backend, tmp_path, "document", "log.txt", text)
    assert status == 200, facts
    assert (facts["text_length"], facts["lines"]) == (1024**2 + 1, 1)
