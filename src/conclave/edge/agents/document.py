"""Document agent: PDF (pypdf), ZIP-based documents (OOXML, ODF, EPUB: ``document_packages``),
legacy OLE2 Office files (olefile: ``document_ole``), RTF (identified) and UTF-8 text."""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from typing import Any

from pypdf import PageObject, PdfReader
from pypdf.errors import PdfReadError, PyPdfError
from pypdf.generic import (
    ArrayObject,
    DictionaryObject,
    IndirectObject,
    NameObject,
    NumberObject,
    PdfObject,
    StreamObject,
    read_object,
)

from conclave.edge.agents import document_ole, document_packages
from conclave.edge.agents.base import CorruptMedia, MediaMismatch, clean

# Text extraction is the slow part of a PDF: past this many pages, or past the budget below, the
# length is a lower bound.
MAX_TEXT_PAGES = 200
# pypdf parses a content stream again each time it is drawn (a stream shared by many pages, a form
# drawn many times), slowly when the stream is dense with operators. The budget counts the decoded
# bytes of every stream each time it is drawn, charged before it is parsed: a few seconds at worst
# (docs/benchmarks.md), and a 200-page report (10 KiB a page) is read whole.
TEXT_BUDGET_BYTES = 2 * 1024**2
# pypdf also builds each font of the resources in force anew for every page and every form drawn
# (a cost comparable to parsing a kilobyte of content, plus its /ToUnicode map): each costs this
# much of the budget, plus the map.
_FONT_COST_BYTES = 1024
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


class _TextBudgetSpent(Exception):
    """Text extraction would parse more content than its budget allows."""


class _TextBudget:
    """Decoded content bytes text extraction may still parse; once spent, it stays spent."""

    def __init__(self, limit: int) -> None:
        self.remaining = limit

    def charge(self, size: int) -> None:
        self.remaining -= size
        self.check()

    def check(self) -> None:
        if self.remaining < 0:
            raise _TextBudgetSpent


def _resolved(value: Any) -> Any:
    return value.get_object() if isinstance(value, IndirectObject) else value


def _decoded_size(value: Any) -> int:
    stream = _resolved(value)
    return len(stream.get_data()) if isinstance(stream, StreamObject) else 0


def _dictionary(value: Any) -> DictionaryObject:
    found = _resolved(value)
    return found if isinstance(found, DictionaryObject) else DictionaryObject()


def _charge_contents(contents: Any, budget: _TextBudget) -> None:
    """Charge a page's content stream, or its array of streams, stream by stream: decoding stops at
    the first one past the budget (pypdf decodes one stream to 75 MB at most)."""
    contents = _resolved(contents)
    for part in contents if isinstance(contents, ArrayObject) else [contents]:
        budget.charge(_decoded_size(part))


def _charge_fonts(resources: DictionaryObject, budget: _TextBudget) -> None:
    for font in _dictionary(resources.get("/Font")).values():
        budget.charge(_FONT_COST_BYTES + _decoded_size(_dictionary(font).get("/ToUnicode")))


def _page_text_length(page: PageObject, budget: _TextBudget) -> int:
    """The length of a page's text, with every stream pypdf parses for it charged to ``budget``.

    pypdf draws a form through the resources of the stream that names it, and tells a visitor
    about each operator before it acts on it and again after: forms are charged as they are drawn,
    with a stack of the resources in force."""
    _charge_contents(page.get("/Contents"), budget)
    resources = [_dictionary(page.get_inherited("/Resources"))]
    _charge_fonts(resources[-1], budget)

    def before(operator: bytes, operands: list[Any], *_matrices: Any) -> None:
        # pypdf carries on past an exception raised inside a form; the next operator outside it
        # raises again, so the page stops at the first operator past the budget.
        budget.check()
        if operator != b"Do":
            return
        # Every Do is pushed, whatever it names, so that ``after`` pops in step.
        resources.append(resources[-1])
        name = operands[0] if operands else None
        xobjects = _dictionary(resources[-2].get("/XObject"))
        form = _resolved(xobjects.get(name)) if isinstance(name, NameObject) else None
        if not isinstance(form, StreamObject) or form.get("/Subtype") == NameObject("/Image"):
            return
        budget.charge(len(form.get_data()))
        resources[-1] = _dictionary(form.get("/Resources"))
        _charge_fonts(resources[-1], budget)

    def after(operator: bytes, *_arguments: Any) -> None:
        if operator == b"Do":
            resources.pop()

    return len(page.extract_text(visitor_operand_before=before, visitor_operand_after=after) or "")


def _text_length(reader: PdfReader, pages: int) -> tuple[int, bool]:
    """The text length of the first pages within the budget, and whether that is all the text."""
    budget = _TextBudget(TEXT_BUDGET_BYTES)
    length = 0
    for page in reader.pages[:MAX_TEXT_PAGES]:
        try:
            length += _page_text_length(page, budget)
        except _TextBudgetSpent:
            return length, False
    return length, pages <= MAX_TEXT_PAGES


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
        text_length, text_complete = _text_length(reader, pages)
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
        "text_length_complete": text_complete,
        "title": _info_text(info.get("/Title")),
        "producer": _info_text(info.get("/Producer")),
        "creator": _info_text(info.get("/Creator")),
        "created": _info_text(info.get("/CreationDate")),
    }


def _text(path: str, fmt: str) -> dict[str, Any]:
    """Facts of a UTF-8 text file; the sniffer saw only its head, so the whole file is checked: a
    text head in front of other bytes (a ZIP, an executable) is no text document."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")("strict")
    characters = lines = 0
    try:
        with open(path, "rb") as stream:
            while chunk := stream.read(1024 * 1024):
                if b"\x00" in chunk:
                    raise MediaMismatch("The file holds NUL bytes: it is not a text document.")
                text = decoder.decode(chunk)
                characters += len(text)
                lines += text.count("\n")
        characters += len(decoder.decode(b"", final=True))
    except UnicodeDecodeError as exc:
        raise MediaMismatch("The file is not UTF-8 text past its first bytes.") from exc
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
