"""Document agent: PDF (pypdf), ZIP-based documents (OOXML, ODF, EPUB: ``document_packages``),
legacy OLE2 Office files (olefile: ``document_ole``), RTF (identified) and UTF-8 text."""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from typing import Any

from pypdf import PdfReader
from pypdf.errors import PdfReadError, PyPdfError
from pypdf.generic import DictionaryObject, IndirectObject, NumberObject, PdfObject, read_object

from conclave.edge.agents import document_ole, document_packages
from conclave.edge.agents.base import CorruptMedia, clean

# Text extraction is the slow part of a PDF; past this many pages the length is a lower bound.
MAX_TEXT_PAGES = 200
# What pypdf raises on a malformed file (beyond its own errors, the built-ins its parsers hit).
_PDF_ERRORS = (
    PdfReadError,
    PyPdfError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    RecursionError,
    OSError,
)


def _clear_object(reader: PdfReader, value: PdfObject | None) -> PdfObject | None:
    """``value``, read from its place in the file when it is a reference, without decrypting.

    Only objects stored on their own are read: one packed in an object stream is inside that
    stream's encrypted bytes, so it is unknowable without the password (``None``)."""
    if not isinstance(value, IndirectObject):
        return value
    offset = reader.xref.get(value.generation, {}).get(value.idnum)
    if value.idnum in reader.xref_objStm or not isinstance(offset, int):
        return None
    reader.stream.seek(offset)
    if reader.read_object_header(reader.stream) != (value.idnum, value.generation):
        return None
    found: PdfObject = read_object(reader.stream, reader)
    return found


def _page_count_without_password(reader: PdfReader) -> int | None:
    """The page tree's ``/Count`` of a PDF that needs a password to open, when readable.

    The standard security handler encrypts strings and streams only: the catalog, the page tree
    root and its count stay in clear unless they are packed in an object stream."""
    try:
        return _clear_page_count(reader)
    except _PDF_ERRORS:
        return None  # the file opened; only this one fact is unknowable


def _clear_page_count(reader: PdfReader) -> int | None:
    catalog = _clear_object(reader, reader.trailer.raw_get("/Root"))
    if not isinstance(catalog, DictionaryObject) or "/Pages" not in catalog:
        return None
    pages = _clear_object(reader, catalog.raw_get("/Pages"))
    if not isinstance(pages, DictionaryObject) or pages.raw_get("/Type") != "/Pages":
        return None
    count = _clear_object(reader, pages.raw_get("/Count")) if "/Count" in pages else None
    return int(count) if isinstance(count, NumberObject) and count >= 0 else None


def _info_text(value: Any) -> str | None:
    """A document information string as written (an empty one is no information)."""
    return str(value) if value is not None and str(value).strip() else None


def _pdf(path: str) -> dict[str, Any]:
    try:
        reader = PdfReader(path, strict=False)
        encrypted = reader.is_encrypted
        if encrypted and not reader.decrypt(""):
            # Opened with a password only; what is readable in clear is the version and the
            # page count (metadata strings are encrypted, text needs the password).
            return {
                "type": "pdf",
                "pdf_version": reader.pdf_header.removeprefix("%PDF-"),
                "encrypted": True,
                "password_required": True,
                "pages": _page_count_without_password(reader),
                "text_length": None,
            }
        pages = len(reader.pages)
        text_length = sum(len(page.extract_text() or "") for page in reader.pages[:MAX_TEXT_PAGES])
        info: Mapping[str, Any] = reader.metadata or {}
    except _PDF_ERRORS as exc:
        raise CorruptMedia(f"The PDF cannot be read: {type(exc).__name__}.") from exc
    return {
        "type": "pdf",
        "pdf_version": reader.pdf_header.removeprefix("%PDF-"),
        "encrypted": encrypted,
        "password_required": False,
        "pages": pages,
        "text_length": text_length,
        "text_length_complete": pages <= MAX_TEXT_PAGES,
        "title": _info_text(info.get("/Title")),
        "producer": _info_text(info.get("/Producer")),
        "creator": _info_text(info.get("/Creator")),
        "created": _info_text(info.get("/CreationDate")),
    }


def _text(path: str, fmt: str) -> dict[str, Any]:
    decoder = codecs.getincrementaldecoder("utf-8-sig")("replace")
    characters = lines = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(1024 * 1024):
            text = decoder.decode(chunk)
            characters += len(text)
            lines += text.count("\n")
    characters += len(decoder.decode(b"", final=True))
    return {"type": fmt, "encoding": "utf-8", "text_length": characters, "lines": lines}


def extract(path: str, fmt: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The document agent's summary."""
    if fmt == "pdf":
        facts = _pdf(path)
    elif fmt == "zip":
        facts = document_packages.extract(path)
    elif fmt == "ole":
        facts = document_ole.extract(path)
    elif fmt == "rtf":
        # Identified only: RTF's text and its \info metadata are behind control words and code
        # page escapes that no kept library here reads, and the file's own length is not its text.
        facts = {"type": "rtf"}
    else:
        facts = _text(path, fmt)
    return clean(facts)
