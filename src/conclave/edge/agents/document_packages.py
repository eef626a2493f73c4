"""ZIP-based documents: Office Open XML (Word, Excel, PowerPoint, their macro, template and binary
variants), OpenDocument and EPUB, each read from the parts its standard names.

Only package parts are read: the main part is found through the package's relationships and content
types (OOXML), ``mimetype`` and ``META-INF/manifest.xml`` (ODF) or ``META-INF/container.xml``
(EPUB), never through file names alone. Every part is parsed with defusedxml (no entity expansion,
no external references), only when its declared unpacked size is within a cap (zipfile never
unpacks past the declared size, so the cap holds for a zip bomb too), once, streamed with each
element dropped once read and its nesting depth capped, so time and memory grow with the part's
size only.
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
# A package has a handful of relationships, a workbook one per sheet: more is no document.
_MAX_RELATIONSHIPS = 100_000
# Sheet names kept (the stored summary keeps no more items than this either); all are counted.
_MAX_SHEET_NAMES = 500

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


def _checked_size(archive: zipfile.ZipFile, name: str, limit: int) -> None:
    if archive.getinfo(name).file_size > limit:
        raise CorruptMedia(f"The part {name[:100]} unpacks to more than {limit // 1024**2} MiB.")


def _events(
    archive: zipfile.ZipFile, name: str, limit: int
) -> Iterator[tuple[str, Element, Element | None]]:
    """``(event, element, parent)`` as each element of a part starts and ends. Every part is read
    this way, never built whole: an element is dropped from its parent once it has ended, so a part
    of millions of elements is read in flat memory, and nesting is refused past ``_MAX_DEPTH``
    before expat builds the deeper levels (a few KiB of nested tags would otherwise cost GiBs)."""
    _checked_size(archive, name, limit)
    open_elements: list[Element] = []
    with archive.open(name) as stream:
        for event, element in ElementTree.iterparse(stream, events=("start", "end")):
            if event == "start":
                parent = open_elements[-1] if open_elements else None
                open_elements.append(element)
                if len(open_elements) > _MAX_DEPTH:
                    raise CorruptMedia(f"The part {name[:100]} nests deeper than {_MAX_DEPTH}.")
                yield event, element, parent
                continue
            open_elements.pop()
            parent = open_elements[-1] if open_elements else None
            yield event, element, parent
            if parent is not None:
                parent.remove(element)


def _streamed(archive: zipfile.ZipFile, name: str) -> Iterator[tuple[Element, Element | None]]:
    """Each element of a body part with its parent, as it ends."""
    for event, element, parent in _events(archive, name, _MAX_BODY_BYTES):
        if event == "end":
            yield element, parent


def _firsts(archive: zipfile.ZipFile, name: str, names: set[str]) -> dict[str, Element]:
    """The first element (in document order) of each local name in ``names`` in a metadata part,
    read to its end (its text and attributes; its children are dropped)."""
    found: dict[str, Element] = {}
    if name not in archive.NameToInfo:
        return found
    for event, element, _parent in _events(archive, name, _MAX_META_BYTES):
        local = _local(element.tag)
        if event == "start" and local in names and local not in found:
            found[local] = element
    return found


def _relationships(archive: zipfile.ZipFile, source: str) -> list[tuple[str, str]]:
    """``(type, part name)`` of the internal relationships of ``source`` ("" for the package)."""
    folder, _, base = source.rpartition("/")
    name = posixpath.join(folder, "_rels", f"{base}.rels")
    if name not in archive.NameToInfo:
        return []
    found: list[tuple[str, str]] = []
    for event, element, _parent in _events(archive, name, _MAX_META_BYTES):
        target = element.get("Target")
        if event != "end" or _local(element.tag) != "Relationship" or not target:
            continue
        if element.get("TargetMode"):
            continue
        if len(found) == _MAX_RELATIONSHIPS:
            raise CorruptMedia(
                f"The part {name[:100]} has more than {_MAX_RELATIONSHIPS} relationships."
            )
        path = target if target.startswith("/") else posixpath.join("/", folder, target)
        found.append((element.get("Type") or "", posixpath.normpath(path).lstrip("/")))
    return found


def _content_types(archive: zipfile.ZipFile, parts: list[str]) -> dict[str, str]:
    """The content type of each of ``parts`` that has one, from one reading of the package's
    content types: a part's own override (the first), else its extension's default (the last)."""
    name = "[Content_Types].xml"
    if not parts or name not in archive.NameToInfo:
        return {}
    wanted = {"/" + part.lower(): part for part in parts}
    overrides: dict[str, str] = {}
    defaults: dict[str, str] = {}
    for event, element, _parent in _events(archive, name, _MAX_META_BYTES):
        local, content_type = _local(element.tag), element.get("ContentType")
        if event != "end" or content_type is None:
            continue
        if local == "Override":
            part = wanted.get((element.get("PartName") or "").lower())
            if part is not None:
                overrides.setdefault(part, content_type)
        elif local == "Default":
            defaults[(element.get("Extension") or "").lower()] = content_type
    return {
        part: found
        for part in parts
        if (found := overrides.get(part) or defaults.get(part.rpartition(".")[2].lower()))
    }


def _ooxml_main(
    archive: zipfile.ZipFile, relationships: list[tuple[str, str]]
) -> tuple[str, tuple[str, str, str]] | None:
    """The main part and what it makes the package, or ``None`` when it is no Office document."""
    candidates = list(
        dict.fromkeys(
            part
            for kind, part in relationships
            if kind.endswith("/officeDocument") and part in archive.NameToInfo
        )
    )
    content_types = _content_types(archive, candidates)
    for part in candidates:
        known = _OOXML_MAIN.get(content_types.get(part, ""))
        if known is not None:
            return part, known
    for part, content_type in _OOXML_BY_PART.items():
        if part in archive.NameToInfo:
            return part, _OOXML_MAIN[content_type]
    return None


def _properties(
    archive: zipfile.ZipFile, relationships: list[tuple[str, str]]
) -> tuple[dict[str, Element], dict[str, Element]]:
    """The first title and creator of the package's core (Dublin Core) properties, and the
    application and page count of its extended (application) properties."""

    def part(suffix: str, fallback: str) -> str:
        found = next((p for k, p in relationships if k.endswith(suffix)), None)
        return found if found is not None and found in archive.NameToInfo else fallback

    return (
        _firsts(
            archive, part("/metadata/core-properties", "docProps/core.xml"), {"title", "creator"}
        ),
        _firsts(
            archive, part("/extended-properties", "docProps/app.xml"), {"Application", "Pages"}
        ),
    )


def _count(text: str | None) -> int | None:
    digits = (text or "").strip()
    return int(digits) if digits.isdecimal() and len(digits) <= 18 else None


def _ooxml(
    archive: zipfile.ZipFile,
    relationships: list[tuple[str, str]],
    main: str,
    kind: str,
    family: str,
    mime: str,
) -> dict[str, Any]:
    core, extended = _properties(archive, relationships)
    facts: dict[str, Any] = {
        "type": kind,
        "mime": mime,
        "title": _text_of(core.get("title")),
        "creator": _text_of(core.get("creator")),
        "application": _text_of(extended.get("Application")),
    }
    if family == "word":
        # Word has no page count of its own: pages exist only once laid out, and the count is
        # the one the saving application recorded.
        facts["pages"] = _count(_text_of(extended.get("Pages")))
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
        sheets = 0
        names: list[str] = []
        for e, parent in _streamed(archive, main):
            if _local(e.tag) == "sheet" and parent is not None and _local(parent.tag) == "sheets":
                sheets += 1
                if len(names) < _MAX_SHEET_NAMES:
                    names.append(e.get("name") or "")
        facts.update(sheets=sheets, sheet_names=names)
    return facts


def _odf_encrypted_parts(archive: zipfile.ZipFile) -> set[str]:
    """The parts the manifest says are encrypted: a ``file-entry`` with an ``encryption-data``
    child (the manifest schema puts it nowhere else)."""
    name = "META-INF/manifest.xml"
    if name not in archive.NameToInfo:
        return set()
    return {
        _attribute(parent, "full-path") or ""
        for event, element, parent in _events(archive, name, _MAX_META_BYTES)
        if event == "end"
        and _local(element.tag) == "encryption-data"
        and parent is not None
        and _local(parent.tag) == "file-entry"
    }


def _odf(archive: zipfile.ZipFile, mime: str) -> dict[str, Any]:
    kind = _ODF[mime]
    encrypted = _odf_encrypted_parts(archive)
    # A password-protected document encrypts its metadata and body alike: nothing more is
    # knowable without the password.
    meta = (
        {}
        if "meta.xml" in encrypted
        else _firsts(
            archive,
            "meta.xml",
            {"title", "creator", "language", "generator", "document-statistic"},
        )
    )
    facts: dict[str, Any] = {
        "type": kind,
        "mime": mime,
        "encrypted": bool(encrypted),
        "title": _text_of(meta.get("title")),
        "creator": _text_of(meta.get("creator")),
        "language": _text_of(meta.get("language")),
        "generator": _text_of(meta.get("generator")),
    }
    if kind in ("odt", "ott"):
        # As recorded by the saving application (pages exist only once laid out).
        facts["pages"] = _count(_attribute(meta.get("document-statistic"), "page-count"))
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


def _rootfile(archive: zipfile.ZipFile) -> str | None:
    """The package document named by ``META-INF/container.xml``."""
    name = "META-INF/container.xml"
    if name not in archive.NameToInfo:
        return None
    for event, element, _parent in _events(archive, name, _MAX_META_BYTES):
        media_type = element.get("media-type", "application/oebps-package+xml")
        if (
            event == "end"
            and _local(element.tag) == "rootfile"
            and media_type == "application/oebps-package+xml"
        ):
            return element.get("full-path")
    return None


def _epub(archive: zipfile.ZipFile) -> dict[str, Any]:
    rootfile = _rootfile(archive)
    if not rootfile or rootfile not in archive.NameToInfo:
        raise CorruptMedia("The EPUB has no package document (META-INF/container.xml rootfile).")
    version = None
    # The first metadata element's first title, creator and language; the first spine's itemref
    # children (the reading order: chapters, and cover or title pages, in turn).
    metadata: Element | None = None
    metadata_open = False
    found: dict[str, Element] = {}
    spine: Element | None = None
    spine_items = 0
    for event, element, parent in _events(archive, rootfile, _MAX_META_BYTES):
        local = _local(element.tag)
        if event == "end":
            metadata_open = metadata_open and element is not metadata
            continue
        if parent is None:
            version = element.get("version")
        if local == "metadata" and metadata is None:
            metadata, metadata_open = element, True
        elif metadata_open and local in ("title", "creator", "language"):
            found.setdefault(local, element)
        if local == "spine" and spine is None:
            spine = element
        elif local == "itemref" and parent is not None and parent is spine:
            spine_items += 1
    return {
        "type": "epub",
        "mime": _EPUB,
        "epub_version": version,
        "title": _text_of(found.get("title")),
        "creator": _text_of(found.get("creator")),
        "language": _text_of(found.get("language")),
        "spine_items": spine_items,
    }


def extract(path: str) -> dict[str, Any]:
    """What a ZIP-based document is and its facts; ``MediaMismatch`` when the ZIP is none."""
    try:
        with zipfile.ZipFile(path) as archive:
            relationships = _relationships(archive, "")
            found = _ooxml_main(archive, relationships)
            if found is not None:
                main, (kind, family, mime) = found
                return _ooxml(archive, relationships, main, kind, family, mime)
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
