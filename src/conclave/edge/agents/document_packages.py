"""ZIP-based documents: Office Open XML (Word, Excel, PowerPoint, their macro, template and binary
variants), OpenDocument and EPUB, each read from the parts its standard names.

Only package parts are read: the main part is found through the package's relationships and content
types (OOXML), ``mimetype`` and ``META-INF/manifest.xml`` (ODF) or ``META-INF/container.xml``
(EPUB), never through file names alone. Every part is parsed with defusedxml (no entity expansion,
no external references), only when its declared unpacked size is within a cap (zipfile never
unpacks past the declared size, so the cap holds for a zip bomb too), and the large ones (document
bodies) are streamed with each element dropped once read, so memory does not grow with the part.
"""

from __future__ import annotations

import posixpath
import zipfile
from collections.abc import Iterator
from typing import Any
from xml.etree.ElementTree import Element

from defusedxml import DefusedXmlException, ElementTree

from conclave.edge.agents.base import CorruptMedia, MediaMismatch

# Metadata, relationship and manifest parts are parsed whole; bodies are streamed.
_MAX_META_BYTES = 16 * 1024**2
_MAX_BODY_BYTES = 64 * 1024**2
# Office bodies nest a few dozen levels; a part nesting deeper is built to exhaust memory.
_MAX_DEPTH = 1000

_OPENXML = "application/vnd.openxmlformats-officedocument."
# Content type of the main part → (type, family, the file's MIME type).
_OOXML_MAIN = {
    _OPENXML + "wordprocessingml.document.main+xml": (
        "docx",
        "word",
        _OPENXML + "wordprocessingml.document",
    ),
    "application/vnd.ms-word.document.macroEnabled.main+xml": (
        "docm",
        "word",
        "application/vnd.ms-word.document.macroEnabled.12",
    ),
    _OPENXML + "wordprocessingml.template.main+xml": (
        "dotx",
        "word",
        _OPENXML + "wordprocessingml.template",
    ),
    "application/vnd.ms-word.template.macroEnabledTemplate.main+xml": (
        "dotm",
        "word",
        "application/vnd.ms-word.template.macroEnabled.12",
    ),
    _OPENXML + "spreadsheetml.sheet.main+xml": ("xlsx", "excel", _OPENXML + "spreadsheetml.sheet"),
    "application/vnd.ms-excel.sheet.macroEnabled.main+xml": (
        "xlsm",
        "excel",
        "application/vnd.ms-excel.sheet.macroEnabled.12",
    ),
    _OPENXML + "spreadsheetml.template.main+xml": (
        "xltx",
        "excel",
        _OPENXML + "spreadsheetml.template",
    ),
    "application/vnd.ms-excel.template.macroEnabled.main+xml": (
        "xltm",
        "excel",
        "application/vnd.ms-excel.template.macroEnabled.12",
    ),
    "application/vnd.ms-excel.sheet.binary.macroEnabled.main": (
        "xlsb",
        "excel",
        "application/vnd.ms-excel.sheet.binary.macroEnabled.12",
    ),
    _OPENXML + "presentationml.presentation.main+xml": (
        "pptx",
        "powerpoint",
        _OPENXML + "presentationml.presentation",
    ),
    "application/vnd.ms-powerpoint.presentation.macroEnabled.main+xml": (
        "pptm",
        "powerpoint",
        "application/vnd.ms-powerpoint.presentation.macroEnabled.12",
    ),
    _OPENXML + "presentationml.template.main+xml": (
        "potx",
        "powerpoint",
        _OPENXML + "presentationml.template",
    ),
    "application/vnd.ms-powerpoint.template.macroEnabled.main+xml": (
        "potm",
        "powerpoint",
        "application/vnd.ms-powerpoint.template.macroEnabled.12",
    ),
    _OPENXML + "presentationml.slideshow.main+xml": (
        "ppsx",
        "powerpoint",
        _OPENXML + "presentationml.slideshow",
    ),
    "application/vnd.ms-powerpoint.slideshow.macroEnabled.main+xml": (
        "ppsm",
        "powerpoint",
        "application/vnd.ms-powerpoint.slideshow.macroEnabled.12",
    ),
}
# Packages whose content types are missing or unknown still say what they are by their main part.
_OOXML_BY_PART = {
    "word/document.xml": _OPENXML + "wordprocessingml.document.main+xml",
    "xl/workbook.xml": _OPENXML + "spreadsheetml.sheet.main+xml",
    "xl/workbook.bin": "application/vnd.ms-excel.sheet.binary.macroEnabled.main",
    "ppt/presentation.xml": _OPENXML + "presentationml.presentation.main+xml",
}
# The workbook's relationships to its sheets (worksheets, chart, dialog and macro sheets).
_SHEET_RELATIONSHIPS = ("/worksheet", "/chartsheet", "/dialogsheet", "/xlMacrosheet")
_ODF = {
    "application/vnd.oasis.opendocument.text": "odt",
    "application/vnd.oasis.opendocument.text-template": "ott",
    "application/vnd.oasis.opendocument.spreadsheet": "ods",
    "application/vnd.oasis.opendocument.spreadsheet-template": "ots",
    "application/vnd.oasis.opendocument.presentation": "odp",
    "application/vnd.oasis.opendocument.presentation-template": "otp",
    "application/vnd.oasis.opendocument.graphics": "odg",
}
_EPUB = "application/epub+zip"


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _text_of(element: Element | None) -> str | None:
    text = (element.text or "").strip() if element is not None else ""
    return text or None


def _attribute(element: Element | None, name: str) -> str | None:
    """The attribute ``name`` of ``element`` in whatever namespace its vocabulary puts it."""
    if element is None:
        return None
    return next((v for k, v in element.attrib.items() if _local(k) == name), None)


def _first(root: Element | None, name: str) -> Element | None:
    """The first element named ``name`` (any namespace) under ``root``."""
    if root is None:
        return None
    return next((e for e in root.iter() if _local(e.tag) == name), None)


def _checked_size(archive: zipfile.ZipFile, name: str, limit: int) -> None:
    if archive.getinfo(name).file_size > limit:
        raise CorruptMedia(f"The part {name[:100]} unpacks to more than {limit // 1024**2} MiB.")


def _tree(archive: zipfile.ZipFile, name: str) -> Element | None:
    """A small part parsed whole, or ``None`` when the package has no such part."""
    if name not in archive.NameToInfo:
        return None
    _checked_size(archive, name, _MAX_META_BYTES)
    with archive.open(name) as stream:
        root: Element = ElementTree.parse(stream).getroot()
    return root


def _streamed(archive: zipfile.ZipFile, name: str) -> Iterator[tuple[Element, Element | None]]:
    """Each element of a part with its parent, as it ends; the element is then dropped from its
    parent, so a body of millions of elements is read in flat memory."""
    _checked_size(archive, name, _MAX_BODY_BYTES)
    open_elements: list[Element] = []
    with archive.open(name) as stream:
        for event, element in ElementTree.iterparse(stream, events=("start", "end")):
            if event == "start":
                open_elements.append(element)
                if len(open_elements) > _MAX_DEPTH:
                    raise CorruptMedia(f"The part {name[:100]} nests deeper than {_MAX_DEPTH}.")
                continue
            open_elements.pop()
            parent = open_elements[-1] if open_elements else None
            yield element, parent
            if parent is not None:
                parent.remove(element)


def _relationships(archive: zipfile.ZipFile, source: str) -> list[tuple[str, str]]:
    """``(type, part name)`` of the internal relationships of ``source`` ("" for the package)."""
    folder, _, base = source.rpartition("/")
    root = _tree(archive, posixpath.join(folder, "_rels", f"{base}.rels"))
    if root is None:
        return []
    found = []
    for element in root.iter():
        target = element.get("Target")
        if _local(element.tag) != "Relationship" or not target or element.get("TargetMode"):
            continue
        path = target if target.startswith("/") else posixpath.join("/", folder, target)
        found.append((element.get("Type") or "", posixpath.normpath(path).lstrip("/")))
    return found


def _content_type(archive: zipfile.ZipFile, part: str) -> str | None:
    root = _tree(archive, "[Content_Types].xml")
    if root is None:
        return None
    extension = part.rpartition(".")[2].lower()
    default = None
    for element in root.iter():
        if _local(element.tag) == "Override" and (element.get("PartName") or "").lower() == (
            "/" + part.lower()
        ):
            return element.get("ContentType")
        if _local(element.tag) == "Default" and (element.get("Extension") or "").lower() == (
            extension
        ):
            default = element.get("ContentType")
    return default


def _ooxml_main(archive: zipfile.ZipFile) -> tuple[str, tuple[str, str, str]] | None:
    """The main part and what it makes the package, or ``None`` when it is no Office document."""
    for kind, part in _relationships(archive, ""):
        if kind.endswith("/officeDocument") and part in archive.NameToInfo:
            known = _OOXML_MAIN.get(_content_type(archive, part) or "")
            if known is not None:
                return part, known
    for part, content_type in _OOXML_BY_PART.items():
        if part in archive.NameToInfo:
            return part, _OOXML_MAIN[content_type]
    return None


def _properties(archive: zipfile.ZipFile) -> tuple[Element | None, Element | None]:
    """The package's core (Dublin Core) and extended (application) properties parts."""
    core = extended = None
    for kind, part in _relationships(archive, ""):
        if kind.endswith("/metadata/core-properties"):
            core = _tree(archive, part)
        elif kind.endswith("/extended-properties"):
            extended = _tree(archive, part)
    return (
        core if core is not None else _tree(archive, "docProps/core.xml"),
        extended if extended is not None else _tree(archive, "docProps/app.xml"),
    )


def _count(text: str | None) -> int | None:
    digits = (text or "").strip()
    return int(digits) if digits.isdecimal() and len(digits) <= 18 else None


def _ooxml(
    archive: zipfile.ZipFile, main: str, kind: str, family: str, mime: str
) -> dict[str, Any]:
    core, extended = _properties(archive)
    facts: dict[str, Any] = {
        "type": kind,
        "mime": mime,
        "title": _text_of(_first(core, "title")),
        "creator": _text_of(_first(core, "creator")),
        "application": _text_of(_first(extended, "Application")),
    }
    if family == "word":
        # Word has no page count of its own: pages exist only once laid out, and the count is
        # the one the saving application recorded.
        facts["pages"] = _count(_text_of(_first(extended, "Pages")))
        facts["text_length"] = sum(
            len(e.text or "") for e, _ in _streamed(archive, main) if _local(e.tag) == "t"
        )
    elif family == "powerpoint":
        facts["slides"] = sum(
            1
            for e, parent in _streamed(archive, main)
            if _local(e.tag) == "sldId" and parent is not None and _local(parent.tag) == "sldIdLst"
        )
    elif main.endswith(".bin"):
        # The binary workbook's sheet list is a BIFF12 record stream; its relationships to the
        # sheet parts are XML and name the same sheets.
        facts["sheets"] = sum(
            1 for rel, _ in _relationships(archive, main) if rel.endswith(_SHEET_RELATIONSHIPS)
        )
    else:
        names = [
            e.get("name") or ""
            for e, parent in _streamed(archive, main)
            if _local(e.tag) == "sheet" and parent is not None and _local(parent.tag) == "sheets"
        ]
        facts.update(sheets=len(names), sheet_names=names)
    return facts


def _odf_encrypted_parts(archive: zipfile.ZipFile) -> set[str]:
    manifest = _tree(archive, "META-INF/manifest.xml")
    if manifest is None:
        return set()
    return {
        _attribute(entry, "full-path") or ""
        for entry in manifest.iter()
        if _local(entry.tag) == "file-entry" and _first(entry, "encryption-data") is not None
    }


def _odf(archive: zipfile.ZipFile, mime: str) -> dict[str, Any]:
    kind = _ODF[mime]
    encrypted = _odf_encrypted_parts(archive)
    # A password-protected document encrypts its metadata and body alike: nothing more is
    # knowable without the password.
    meta = None if "meta.xml" in encrypted else _tree(archive, "meta.xml")
    statistic = _first(meta, "document-statistic")
    facts: dict[str, Any] = {
        "type": kind,
        "mime": mime,
        "encrypted": bool(encrypted),
        "title": _text_of(_first(meta, "title")),
        "creator": _text_of(_first(meta, "creator")),
        "language": _text_of(_first(meta, "language")),
        "generator": _text_of(_first(meta, "generator")),
    }
    if kind in ("odt", "ott"):
        # As recorded by the saving application (pages exist only once laid out).
        facts["pages"] = _count(_attribute(statistic, "page-count"))
    body = {
        "ods": "spreadsheet",
        "ots": "spreadsheet",
        "odp": "presentation",
        "otp": "presentation",
    }
    container = body.get(kind)
    if container is not None:
        fact, item = ("sheets", "table") if container == "spreadsheet" else ("slides", "page")
        facts[fact] = None
        if "content.xml" not in encrypted and "content.xml" in archive.NameToInfo:
            facts[fact] = sum(
                1
                for e, parent in _streamed(archive, "content.xml")
                if _local(e.tag) == item and parent is not None and _local(parent.tag) == container
            )
    return facts


def _epub(archive: zipfile.ZipFile) -> dict[str, Any]:
    container = _tree(archive, "META-INF/container.xml")
    rootfile = next(
        (
            e.get("full-path")
            for e in (container.iter() if container is not None else ())
            if _local(e.tag) == "rootfile"
            and e.get("media-type", "application/oebps-package+xml")
            == "application/oebps-package+xml"
        ),
        None,
    )
    package = _tree(archive, rootfile) if rootfile else None
    if package is None:
        raise CorruptMedia("The EPUB has no package document (META-INF/container.xml rootfile).")
    metadata = _first(package, "metadata")
    spine = _first(package, "spine")
    return {
        "type": "epub",
        "mime": _EPUB,
        "epub_version": package.get("version"),
        "title": _text_of(_first(metadata, "title")),
        "creator": _text_of(_first(metadata, "creator")),
        "language": _text_of(_first(metadata, "language")),
        # The reading order: the content documents (chapters, and cover or title pages) in turn.
        "spine_items": sum(
            1 for e in (spine if spine is not None else ()) if _local(e.tag) == "itemref"
        ),
    }


def extract(path: str) -> dict[str, Any]:
    """What a ZIP-based document is and its facts; ``MediaMismatch`` when the ZIP is none."""
    try:
        with zipfile.ZipFile(path) as archive:
            found = _ooxml_main(archive)
            if found is not None:
                main, (kind, family, mime) = found
                return _ooxml(archive, main, kind, family, mime)
            if "mimetype" in archive.NameToInfo:
                with archive.open("mimetype") as stream:
                    declared = stream.read(100).decode("ascii", "replace").strip()
                if declared in _ODF:
                    return _odf(archive, declared)
                if declared == _EPUB:
                    return _epub(archive)
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        KeyError,
        EOFError,
        ValueError,
        NotImplementedError,
        ElementTree.ParseError,
        DefusedXmlException,
    ) as exc:
        raise CorruptMedia(f"The document package cannot be read: {type(exc).__name__}.") from exc
    raise MediaMismatch("The ZIP archive is not an Office, OpenDocument or EPUB document.")
