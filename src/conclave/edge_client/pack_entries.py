"""The log's entry of a pack the device sent: fetched beside its receipt, kept, and compared with
what the device sent.

A receipt proves only that the log holds the leaf whose hash the upload's answer named. The
leaf's data, the pack's ``conclave.pack/v1`` entry, says whose bytes that leaf is of: the device
fetches it (``GET /logs/packs/leaves/{index}``, served to the device that uploaded the pack),
keeps it once it hashes to the receipt's leaf hash, and compares its fields with what it recorded
when it sent the file. A server that named another device's leaf, or any leaf, in its answer is
caught here.

Whatever answers in the server's place may send anything. The answer and the entry are read
strictly (UTF-8 JSON, no key twice, no fraction, NaN or integer of more than 20 digits) and
a value no store can carry (a lone surrogate, NUL) makes the entry invalid; what the device
prints of a value is its ASCII ``repr``, cut short.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from conclave.edge_client.outbox_records import StoredReceipt
from conclave.platform.inputs import find_unsafe
from conclave.platform.transparency import base64text
from conclave.platform.transparency.errors import MalformedInput
from conclave.platform.transparency.hashing import leaf_hash
from conclave.platform.transparency.receipt import MAX_DOCUMENT_BYTES

PACK_FORMAT = "conclave.pack/v1"
"""The entry format of the edge's log ``packs``."""

_MAX_DIGITS = 20
MAX_SHOWN_DEPTH = 4
"""How deep a kept entry may nest to be shown as JSON: a ``conclave.pack/v1`` entry is flat (one
object of scalars); printed indented, a deep one grows with depth times width."""
MAX_SHOWN_BYTES = 64 * 1024
"""How large a kept entry may be to be shown as JSON (a real one is under a kilobyte)."""


def entry_of_answer(answer: bytes, index: int, log_leaf_hash: str) -> bytes | None:
    """The entry in ``answer`` (the JSON of ``GET /logs/{name}/leaves/{index}``) if it is the
    data of leaf ``index`` and hashes to ``log_leaf_hash`` (RFC 9162: SHA-256(0x00 || data));
    ``None`` for anything else (another leaf, a page, a body that is not such JSON)."""
    try:
        document = strict_json(answer)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    found_index, data = document.get("index"), document.get("data")
    if type(found_index) is not int or found_index != index or not isinstance(data, str):
        return None
    try:
        entry = base64text.decode(data, "data")
    except MalformedInput:
        return None
    return entry if leaf_hash(entry).hex() == log_leaf_hash else None


def entry_differences(kept: StoredReceipt, entry: bytes) -> list[str]:
    """How the log's ``entry`` of ``kept``'s pack differs from what the device sent, one
    sentence each; empty when it is the entry of exactly that."""
    if leaf_hash(entry).hex() != kept.log_leaf_hash:
        return ["the kept entry is not the data of the leaf the upload's answer named"]
    try:
        fields = strict_json(entry)
    except ValueError as error:
        return [f"the log's entry is not a {PACK_FORMAT} entry: {error}"]
    if not isinstance(fields, dict) or fields.get("format") != PACK_FORMAT:
        return [f"the log's entry is not a {PACK_FORMAT} entry"]
    unsafe = find_unsafe(fields)
    if unsafe is not None:
        return [f"the log's entry holds a value no store can carry at {_shown(unsafe.field)}"]
    if kept.part_index is not None and kept.sent_sha256 is None:
        return [
            f"the upload's answer named more packs than the files the device sent (this one "
            f"would be file {kept.part_index})"
        ]
    expected: list[tuple[str, object, str]] = [
        ("evidence_id", kept.evidence_id, "the upload's answer named"),
        ("sha256", kept.sent_sha256, "the device sent"),
        ("size_bytes", kept.sent_size, "the device sent"),
        ("part_index", kept.part_index, "the file's position in its upload is"),
        ("idempotency_key_sha256", kept.idempotency_key_sha256, "the upload's key hashes to"),
    ]
    if kept.device_id is not None:
        mine = hashlib.sha256(kept.device_id.encode("utf-8", "surrogatepass")).hexdigest()
        expected.append(("device_sha256", mine, f"this device's id {_shown(kept.device_id)} is"))
    return [
        f"the log's entry names {name} {_shown(fields.get(name))}, {source} {_shown(value)}"
        for name, value, source in expected
        # bool is an int in Python: True must not pass for part 1.
        if type(fields.get(name)) is not type(value) or fields.get(name) != value
    ]


def entry_document(entry: bytes | str) -> Any:
    """A kept entry to show: its JSON when it is at most :data:`MAX_SHOWN_BYTES`, nests at most
    :data:`MAX_SHOWN_DEPTH` deep, reads strictly and holds only values any JSON reader can
    print, else its text (undecodable bytes escaped). An entry that hashes to its leaf is kept
    whatever it holds, so showing it must not fail, nor cost more than its size."""
    raw = entry.encode("utf-8", "surrogatepass") if isinstance(entry, str) else entry
    try:
        if len(raw) > MAX_SHOWN_BYTES or _depth(raw) > MAX_SHOWN_DEPTH:
            raise ValueError("not shown as JSON")
        document = strict_json(raw)
    except ValueError:
        document = None
    else:
        if find_unsafe(document) is None:
            return document
    # Decoding never yields a lone surrogate (undecodable bytes become \xNN); NUL is spelled out.
    return raw.decode("utf-8", "backslashreplace").replace("\x00", "\\x00")


def strict_json(document: bytes) -> Any:
    """``document`` decoded as UTF-8 JSON of at most 2 MiB, with no key twice, no fraction,
    NaN or infinity and no integer of more than 20 digits; ``ValueError`` (saying why)
    otherwise."""
    if len(document) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        text = document.decode("utf-8")
        return json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_int=_bounded_int,
            parse_float=_no_fraction,
            parse_constant=_no_fraction,
        )
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as error:
        raise ValueError(str(error)[:200]) from None


def _depth(document: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings skipped)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in document:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key, value in pairs:
        if key in fields:
            raise ValueError(f"the key {_shown(key)} appears twice")
        fields[key] = value
    return fields


def _bounded_int(text: str) -> int:
    # Refused by its length before any conversion: a number of 10,000 digits costs nothing.
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise ValueError(f"an integer of more than {_MAX_DIGITS} digits")
    return int(text)


def _no_fraction(text: str) -> Any:
    raise ValueError("a fraction, NaN or infinity (an entry holds none)")


def _shown(value: object) -> str:
    """``value`` as printable ASCII, at most 80 characters (it may come from anyone)."""
    text = ascii(value)
    return text if len(text) <= 80 else text[:77] + "..."
