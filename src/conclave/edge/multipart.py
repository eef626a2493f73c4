"""Streaming multipart/form-data reader for uploads.

The body is parsed as it arrives: file parts go straight into temporary blobs (hashed on the way,
refused with 413 the moment one passes its limit); the form fields the caller names are kept in
memory, each within its own limit, UTF-8 without NUL (422 ``UNSAFE_INPUT``) and sent once; other
fields are skipped unread (still bounded in size). Every non-file part counts towards
:data:`MAX_FIELDS`: a cap on distinct names let a million same-name parts through.
For signed requests the SHA-256 of the raw body is computed too; only for them, as it is a second
hash pass over every byte.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header

from conclave.edge.blobs import BlobStore, TempBlob
from conclave.platform.errors import (
    BadRequest,
    PayloadTooLarge,
    Unprocessable,
    UnsupportedMediaType,
)
from conclave.platform.inputs import decode_checked
from conclave.platform.problem_types import ProblemCode

MAX_FIELD_BYTES = 1024 * 1024
"""Largest field skipped unread (one the caller did not name)."""
MAX_FIELDS = 32
"""Most non-file parts in one upload, each part counted."""


@dataclass
class FilePart:
    """One uploaded file: its client-given name and content type, and the received bytes."""

    filename: str
    content_type: str
    blob: TempBlob


@dataclass
class Upload:
    """A fully received multipart body."""

    fields: dict[str, str] = field(default_factory=dict)
    files: list[FilePart] = field(default_factory=list)
    body_sha256: str = ""  # only with ``hash_body``
    body_bytes: int = 0

    def discard(self) -> None:
        """Delete every temporary file of this upload."""
        for part in self.files:
            part.blob.discard()


def boundary_of(content_type: str) -> bytes:
    """The multipart boundary; 415 when the body is not multipart/form-data."""
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise UnsupportedMediaType(
            "Uploads must be multipart/form-data with a boundary.",
            code=ProblemCode.UNSUPPORTED_MEDIA_TYPE,
        )
    return boundary


class _Receiver:
    """Callbacks of the multipart parser; builds an :class:`Upload`."""

    def __init__(
        self,
        blobs: BlobStore,
        max_file_bytes: int,
        max_files: int,
        field_limits: Mapping[str, int],
    ) -> None:
        self.upload = Upload()
        self._blobs = blobs
        self._max_file_bytes = max_file_bytes
        self._max_files = max_files
        self._field_limits = field_limits
        self._field_count = 0
        self._field_limit = MAX_FIELD_BYTES
        self._field_size = 0
        self._header_name = b""
        self._header_value = b""
        self._disposition = b""
        self._content_type = b""
        self._field: bytearray | None = None  # a named field being read
        self._skipping = False  # a field nobody asked for, skipped unread
        self._field_name = ""
        self._blob: TempBlob | None = None

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": self._header_field,
            "on_header_value": self._header_value_data,
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
        }

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _header_value_data(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _part_begin(self) -> None:
        self._disposition = self._content_type = b""
        self._field = None
        self._skipping = False
        self._blob = None

    def _header_end(self) -> None:
        name = self._header_name.strip().lower()
        if name == b"content-disposition":
            self._disposition = self._header_value
        elif name == b"content-type":
            self._content_type = self._header_value
        self._header_name = self._header_value = b""

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        name = options.get(b"name", b"").decode("utf-8", "replace")
        filename = options.get(b"filename")
        if filename is not None or name == "file":
            if len(self.upload.files) >= self._max_files:
                raise PayloadTooLarge(
                    f"At most {self._max_files} files per upload.", code=ProblemCode.TOO_MANY_FILES
                )
            self._blob = self._blobs.new_temp(self._max_file_bytes)
            self.upload.files.append(
                FilePart(
                    filename=(filename or b"").decode("utf-8", "replace"),
                    content_type=self._content_type.decode("latin-1").strip(),
                    blob=self._blob,
                )
            )
        else:
            self._field_count += 1
            if self._field_count > MAX_FIELDS:
                raise PayloadTooLarge(
                    f"At most {MAX_FIELDS} form fields.", code=ProblemCode.TOO_MANY_FIELDS
                )
            self._field_name = name
            self._field_size = 0
            limit = self._field_limits.get(name)
            if limit is None:
                self._field_limit = MAX_FIELD_BYTES
                self._skipping = True
                return
            if name in self.upload.fields:
                # Which copy would win differs between parsers, proxies and inspectors: refused.
                raise Unprocessable(
                    f"Form field {name!r} is sent more than once.",
                    code=ProblemCode.DUPLICATE_FIELD,
                    errors=[{"field": name, "message": "repeated"}],
                )
            self._field_limit = limit
            self._field = bytearray()

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._blob is not None:
            self._blob.write(data[start:end])
        elif self._field is not None or self._skipping:
            if self._field is not None:
                self._field += data[start:end]
            self._field_size += end - start
            if self._field_size > self._field_limit:
                raise PayloadTooLarge(
                    f"Form field {self._field_name!r} exceeds {self._field_limit} bytes.",
                    code=ProblemCode.FIELD_TOO_LARGE,
                )

    def _part_end(self) -> None:
        if self._blob is not None:
            self._blob.close()
        elif self._field is not None:
            name = self._field_name
            self.upload.fields[name] = decode_checked(bytes(self._field), ("form", name))


async def read_upload(
    chunks: AsyncIterator[bytes],
    boundary: bytes,
    blobs: BlobStore,
    *,
    max_file_bytes: int,
    max_files: int,
    field_limits: Mapping[str, int] | None = None,
    hash_body: bool = False,
) -> Upload:
    """Receive a multipart body; temporary files are deleted again if anything goes wrong.
    ``field_limits`` names the fields to keep and their size limits (others are skipped,
    within :data:`MAX_FIELD_BYTES`). With ``hash_body`` the raw body's SHA-256 is in
    ``body_sha256`` (for signature checks)."""
    receiver = _Receiver(blobs, max_file_bytes, max_files, field_limits or {})
    parser = MultipartParser(boundary, receiver.callbacks())  # type: ignore[arg-type]
    body_hash = hashlib.sha256() if hash_body else None
    upload = receiver.upload
    try:
        async for chunk in chunks:
            if body_hash is not None:
                body_hash.update(chunk)
            upload.body_bytes += len(chunk)
            parser.write(chunk)
        parser.finalize()
        # The parser's ``finalize`` does not check that the closing boundary arrived: a body cut
        # short (a dropped connection, a proxy limit) would otherwise store a truncated file as
        # if it were complete.
        if parser.state != MultipartState.END:
            raise BadRequest(
                "The multipart body ended before its closing boundary.",
                code=ProblemCode.TRUNCATED_UPLOAD,
            )
    except MultipartParseError as exc:
        upload.discard()
        raise BadRequest(
            "The multipart body is malformed.", code=ProblemCode.MALFORMED_MULTIPART
        ) from exc
    except BaseException:
        upload.discard()
        raise
    if body_hash is not None:
        upload.body_sha256 = body_hash.hexdigest()
    return upload
