"""Document agent: PDF pages and text length (pypdf), Office/ODF package type, plain text."""

from __future__ import annotations

import codecs
import re
import zipfile
from collections.abc import Mapping
from typing import Any

from defusedxml import ElementTree
from pypdf import PdfReader
from pypdf.errors import PdfReadError, PyPdfError

from conclave.edge.agents.base import CorruptMedia, MediaMismatch, clean

# Text extraction is the slow part of a PDF; past this many pages the length is a lower bound.
MAX_TEXT_PAGES = 200
_MAX_XML_BYTES = 64 * 1024**2
_OPENXML = "application/vnd.openxmlformats-officedocument."
_OOXML = {
    "word/document.xml": ("docx", _OPENXML + "wordprocessingml.document"),
    "xl/workbook.xml": ("xlsx", _OPENXML + "spreadsheetml.sheet"),
    "ppt/presentation.xml": ("pptx", _OPENXML + "presentationml.presentation"),
}
_ODF = {
    "application/vnd.oasis.opendocument.text": "odt",
    "application/vnd.oasis.opendocument.spreadsheet": "ods",
    "application/vnd.oasis.opendocument.presentation": "odp",
    "application/epub+zip": "epub",
}


def _pdf(path: str) -> dict[str, Any]:
    try:
        reader = PdfReader(path, strict=False)
        encrypted = reader.is_encrypted
        if encrypted and not reader.decrypt(""):
            return {"type": "pdf", "encrypted": True, "pages": None}
        pages = len(reader.pages)
        text_length = sum(len(page.extract_text() or "") for page in reader.pages[:MAX_TEXT_PAGES])
        info: Mapping[str, Any] = reader.metadata or {}
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, AttributeError,
            IndexError, RecursionError, OSError) as exc:  # fmt: skip
        raise CorruptMedia(f"The PDF cannot be read: {type(exc).__name__}.") from exc
    return {
        "type": "pdf",
        "pdf_version": reader.pdf_header.removeprefix("%PDF-"),
        "encrypted": encrypted,
        "pages": pages,
        "text_length": text_length,
        "text_length_complete": pages <= MAX_TEXT_PAGES,
        "producer": info.get("/Producer"),
        "creator": info.get("/Creator"),
        "created": info.get("/CreationDate"),
    }


def _xml_text_length(archive: zipfile.ZipFile, name: str) -> int:
    if archive.getinfo(name).file_size > _MAX_XML_BYTES:
        raise CorruptMedia("A part of the document unpacks to more than 64 MiB.")
    with archive.open(name) as stream:
        root = ElementTree.parse(stream).getroot()
    return sum(len(element.text or "") for element in root.iter() if element.tag.endswith("}t"))


def _package(path: str) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            for part, (kind, mime) in _OOXML.items():
                if part in names:
                    facts: dict[str, Any] = {"type": kind, "mime": mime, "parts": len(names)}
                    if kind == "docx":
                        facts["text_length"] = _xml_text_length(archive, part)
                    if kind == "pptx":
                        facts["slides"] = sum(
                            1 for n in names if re.fullmatch(r"ppt/slides/slide\d+\.xml", n)
                        )
                    if kind == "xlsx":
                        facts["sheets"] = sum(
                            1 for n in names if re.fullmatch(r"xl/worksheets/sheet\d+\.xml", n)
                        )
                    return facts
            if "mimetype" in names:
                mime = archive.read("mimetype")[:100].decode("ascii", "replace").strip()
                if mime in _ODF:
                    return {"type": _ODF[mime], "mime": mime, "parts": len(names)}
    except (zipfile.BadZipFile, KeyError, EOFError, ElementTree.ParseError) as exc:
        raise CorruptMedia(f"The document package cannot be read: {type(exc).__name__}.") from exc
    raise MediaMismatch("The ZIP archive is not an Office or OpenDocument document.")


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
        facts = _package(path)
    elif fmt == "ole":
        facts = {"type": "ole-compound", "note": "legacy Office file, identified only"}
    elif fmt == "rtf":
        facts = {"type": "rtf", **_text(path, "rtf")}
    else:
        facts = _text(path, fmt)
    return clean(facts)
