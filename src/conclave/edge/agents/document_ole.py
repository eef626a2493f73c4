"""Legacy Office files: OLE2 compound files (Word, Excel, PowerPoint, Outlook, and password-
encrypted Office Open XML, which Office wraps in one), read with olefile.

The application is told by the streams the compound file holds; title, author, application and
page or slide counts come from its summary information property sets, as the saving application
recorded them. The body streams are never read.
"""

from __future__ import annotations

import codecs
from typing import Any

import olefile

from conclave.edge.agents.base import CorruptMedia, MediaMismatch

# The property-set streams are a few KiB; a larger one is not parsed (olefile reads a stream whole).
_MAX_PROPERTY_BYTES = 1024**2
_SUMMARY_STREAMS = ("\x05SummaryInformation", "\x05DocumentSummaryInformation")


def _kind(ole: olefile.OleFileIO) -> tuple[str, str]:
    """``(type, MIME type)`` from the streams at the root of the compound file."""
    names = {entry[0].lower() for entry in ole.listdir(streams=True, storages=True)}
    if {"encryptioninfo", "encryptedpackage"} <= names:
        return "ooxml-encrypted", "application/x-ole-storage"
    if "worddocument" in names:
        return "doc", "application/msword"
    if "workbook" in names or "book" in names:
        return "xls", "application/vnd.ms-excel"
    if "powerpoint document" in names:
        return "ppt", "application/vnd.ms-powerpoint"
    if "__properties_version1.0" in names or any(n.startswith("__substg1.0_") for n in names):
        return "msg", "application/vnd.ms-outlook"
    raise MediaMismatch("The compound file is not a Word, Excel, PowerPoint or Outlook document.")


def _decoder(codepage: int | None) -> str:
    # The code page property is a signed 16-bit integer: UTF-8 (65001) reads as -535.
    number = (codepage or 1252) & 0xFFFF
    name = {65001: "utf-8", 1200: "utf-16-le"}.get(number, f"cp{number}")
    try:
        return codecs.lookup(name).name
    except LookupError:
        return "cp1252"


def _text(value: Any, encoding: str) -> str | None:
    if isinstance(value, bytes):
        value = value.decode(encoding, "replace")
    text = value.strip("\x00 \t\r\n") if isinstance(value, str) else ""
    return text or None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _summary(ole: olefile.OleFileIO, kind: str) -> dict[str, Any]:
    present = [name for name in _SUMMARY_STREAMS if ole.exists(name)]
    if not present or any(ole.get_size(name) > _MAX_PROPERTY_BYTES for name in present):
        return {}
    try:
        meta = ole.get_metadata()
    except Exception:  # a damaged property set leaves the document itself readable
        return {}
    encoding = _decoder(meta.codepage)
    facts: dict[str, Any] = {
        "title": _text(meta.title, encoding),
        "creator": _text(meta.author, encoding),
        "application": _text(meta.creating_application, encoding),
    }
    if kind == "doc":
        facts["pages"] = _count(meta.num_pages)
    elif kind == "ppt":
        facts["slides"] = _count(meta.slides)
    return facts


def extract(path: str) -> dict[str, Any]:
    """What a compound file is and what its summary information says."""
    try:
        with olefile.OleFileIO(path) as ole:
            kind, mime = _kind(ole)
            facts: dict[str, Any] = {"type": kind, "mime": mime}
            if kind == "ooxml-encrypted":
                # Word, Excel and PowerPoint files encrypted with a password look alike: which one
                # it is, and everything else, is inside the encrypted package.
                facts["encrypted"] = True
            else:
                facts.update(_summary(ole, kind))
            return facts
    except (OSError, ValueError, IndexError, KeyError, TypeError, RecursionError) as exc:
        raise CorruptMedia(f"The compound file cannot be read: {type(exc).__name__}.") from exc
