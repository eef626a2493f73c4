"""Upload evidence from the console: ``GET/POST /evidence/new``, a file streamed on to the edge's
``POST /api/edge-intake/{media_type}`` as the signed-in user.

The console's other forms are URL-encoded only (:func:`conclave.console.web.url_encoded_form`):
the platform's body limit exempts multipart bodies, and Starlette's form parser spools every file
part to disk however large. This route reads its multipart body itself, as it arrives, with
python-multipart's streaming parser and limits of its own: the CSRF token must be the **first**
field (checked before anything else is read), the text fields come before the file and are
bounded, there is one file, and it is counted against the media type's limit while it is
relayed. The file's bytes go on to the edge as they are parsed, never held whole: one chunk of
the browser's body is in memory at a time. A file past the limit ends the request to the edge
mid-body (the edge stores nothing) and the form shows why.

The form carries an ``Idempotency-Key`` made when it was shown: a double submit, or the same form
sent again after going back, is answered by the edge with the pack the first one made.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from python_multipart.multipart import MultipartParser, parse_options_header

from conclave.console.session import CSRF_FIELD, Session
from conclave.console.strict_json import JsonRefused, parse_strict_json
from conclave.console.upstream import Services, path_segment, problem_of, unusable_answer
from conclave.console.web import ServicesDep, SignedIn, media_type_of, page
from conclave.platform.errors import Forbidden, UnsupportedMediaType
from conclave.platform.media_types import media_type_names, registered_media_types
from conclave.platform.problem_types import ProblemCode, title_of
from conclave.settings import ConsoleSettings

router = APIRouter(include_in_schema=False)

UPLOAD = "/api/edge-intake"
FIELD_LIMITS = {
    CSRF_FIELD: 256,
    "idempotency_key": 256,
    "media_type": 64,
    "metadata": 64 * 1024,
}
"""The text fields the form has, in bytes each; any other field is refused."""
MAX_HEADER_BYTES = 4096
"""Longest header line of a part (a file name is in one)."""
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")


class UploadRefused(Exception):
    """The form cannot be sent on: shown on the form, next to what to change."""

    def __init__(self, status: int, code: str, detail: str, field: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field


def upload_limits(settings: ConsoleSettings) -> dict[str, int]:
    """Each media type's file size limit: its default, or ``CONSOLE_MAX_UPLOAD_BYTES``'s (the
    edge's ``EDGE_MAX_UPLOAD_BYTES``, set alike)."""
    limits = {name: media.max_upload_bytes for name, media in registered_media_types().items()}
    return limits | {key: value for key, value in settings.max_upload_bytes.items() if value > 0}


def _form(
    request: Request,
    session: Session,
    *,
    status_code: int = 200,
    key: str | None = None,
    chosen: Mapping[str, str] | None = None,
    problem: dict[str, Any] | None = None,
) -> HTMLResponse:
    settings: ConsoleSettings = request.app.state.settings
    return page(
        request,
        "evidence_new.html",
        session,
        status_code=status_code,
        media_types=media_type_names(),
        limits=upload_limits(settings),
        key=key or str(uuid.uuid4()),
        chosen=chosen or {},
        problem=problem,
    )


@router.get("/evidence/new")
async def upload_form(
    request: Request,
    session: SignedIn,
    type: Annotated[str | None, Query(max_length=64)] = None,
) -> HTMLResponse:
    """The upload form, with a fresh idempotency key."""
    return _form(request, session, chosen={"media_type": type or "image"})


@router.post("/evidence/new")
async def upload_evidence(request: Request, session: SignedIn, services: ServicesDep) -> Response:
    """Stream the form's file on to the edge; the new pack's page, or the form with the
    refusal."""
    if media_type_of(request) != "multipart/form-data":
        raise UnsupportedMediaType("The upload form is sent as multipart/form-data.")
    _, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary", b"")
    if not boundary or len(boundary) > 200:
        raise UnsupportedMediaType("The upload has no multipart boundary.")
    settings: ConsoleSettings = request.app.state.settings
    reader = _FormReader(boundary, session, upload_limits(settings))
    try:
        answer = await _relay(reader, request.stream(), services, session, settings)
    except UploadRefused as refused:
        problem: dict[str, Any] = {
            "title": title_of(refused.code),
            "detail": refused.detail,
            "code": refused.code,
            "status": refused.status,
            "field": refused.field,
        }
        return _refused(request, session, reader, problem)
    if not answer.is_success:
        found = problem_of("edge", answer)
        problem = {
            "title": found.title,
            "detail": found.detail,
            "code": found.code,
            "status": found.status if 400 <= found.status < 600 else 502,
            "errors": found.errors,
            "service": "edge",
            "field": "metadata" if "metadata" in found.detail.lower() else "file",
        }
        return _refused(request, session, reader, problem)
    try:
        evidence_id = str(answer.json()["evidence_ids"][0])
    except (ValueError, KeyError, IndexError, TypeError):
        raise unusable_answer("edge", "an upload answer without a pack") from None
    target = f"/evidence/{path_segment(evidence_id, 'The evidence id')}"
    return RedirectResponse(target, status_code=303)


def _refused(
    request: Request, session: Session, reader: _FormReader, problem: dict[str, Any]
) -> HTMLResponse:
    """The form again, as it was sent (its key too: sent again, it still makes one pack), with
    the refusal above it."""
    return _form(
        request,
        session,
        status_code=problem["status"],
        key=reader.key(),
        chosen=reader.fields,
        problem=problem,
    )


async def _relay(
    reader: _FormReader,
    body: AsyncIterator[bytes],
    services: Services,
    session: Session,
    settings: ConsoleSettings,
) -> Any:
    """Read the form up to its file, then send the file on to the edge as it arrives."""
    async for chunk in body:
        reader.write(chunk)
        if reader.file_begun:
            break
    if not reader.file_begun:
        reader.finish_without_file()
    media_type, metadata = reader.checked_fields()
    boundary = f"conclave-console-{uuid.uuid4().hex}"
    head = _text_part(boundary, "metadata", metadata) if metadata else b""
    filename = reader.filename.replace('"', "%22").replace("\r", "").replace("\n", "")
    head += (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()

    async def relayed() -> AsyncIterator[bytes]:
        yield head
        yield reader.take_file_bytes()
        async for chunk in body:
            reader.write(chunk)
            data = reader.take_file_bytes()
            if data:
                yield data
        reader.finish()
        yield f"\r\n--{boundary}--\r\n".encode()

    headers = {
        "Content-Type": f"multipart/form-data; boundary={boundary}",
        "Idempotency-Key": reader.key(),
    }
    path = f"{UPLOAD}/{path_segment(media_type, 'The media type')}"
    return await services.send_stream(
        "edge", path, session, relayed(), headers, answer_seconds=settings.upload_timeout_seconds
    )


def _text_part(boundary: str, name: str, value: str) -> bytes:
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        + value.encode()
        + b"\r\n"
    )


class _FormReader:
    """The browser's multipart body, fed as it arrives: text fields kept (bounded), the file's
    bytes handed on (:meth:`take_file_bytes`), every limit checked as the bytes come."""

    def __init__(self, boundary: bytes, session: Session, limits: Mapping[str, int]) -> None:
        self.fields: dict[str, str] = {}
        self.filename = ""
        self.file_begun = False
        self._session = session
        self._limits = limits
        self._parts = 0
        self._name: str | None = None
        self._value = bytearray()
        self._header_field = bytearray()
        self._header_value = bytearray()
        self._disposition = b""
        self._in_file = False
        self._file_done = False
        self._file_bytes = 0
        self._file_limit = 0
        self._pending: list[bytes] = []
        self._ended = False
        self._parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._part_begin,
                "on_header_field": self._header_field_data,
                "on_header_value": self._header_value_data,
                "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished,
                "on_part_data": self._part_data,
                "on_part_end": self._part_end,
                "on_end": self._end,
            },
            max_header_count=4,
            max_header_size=MAX_HEADER_BYTES,
        )

    def key(self) -> str:
        """The form's idempotency key (a fresh one when the form sent none usable)."""
        given = self.fields.get("idempotency_key", "")
        if 8 <= len(given) <= 128 and set(given) <= _KEY_CHARS:
            return given
        self.fields["idempotency_key"] = given = str(uuid.uuid4())
        return given

    def write(self, chunk: bytes) -> None:
        """Feed the next bytes of the body; refusals raise :class:`UploadRefused` (or 403)."""
        try:
            self._parser.write(chunk)
        except (UploadRefused, Forbidden):
            raise
        except Exception as exc:  # python-multipart's errors: a body no browser sends
            raise UploadRefused(
                400, ProblemCode.MALFORMED_MULTIPART, "The form's body is not valid multipart."
            ) from exc

    def take_file_bytes(self) -> bytes:
        """The file's bytes parsed since the last call."""
        data = b"".join(self._pending)
        self._pending.clear()
        return data

    def finish_without_file(self) -> None:
        """The body ended before a file: which field was missing."""
        self._check_csrf_seen()
        raise UploadRefused(422, ProblemCode.MISSING_FILE, "Choose a file to upload.", "file")

    def finish(self) -> None:
        """The body ended: it must have ended as multipart does, after the file."""
        if not (self._ended and self._file_done):
            raise UploadRefused(
                400, ProblemCode.TRUNCATED_UPLOAD, "The form's body ended mid-file.", "file"
            )

    def checked_fields(self) -> tuple[str, str]:
        """The media type and the metadata (compact JSON, or ``""``), as the edge takes them."""
        media_type = self.fields.get("media_type", "")
        if media_type not in self._limits:
            raise UploadRefused(
                422, ProblemCode.VALIDATION_FAILED, "Choose one of the media types.", "media_type"
            )
        self._file_limit = self._limits[media_type]
        raw = self.fields.get("metadata", "").strip()
        if not raw:
            return media_type, ""
        try:
            value = parse_strict_json(raw)
        except JsonRefused as exc:
            raise UploadRefused(422, ProblemCode.INVALID_METADATA, str(exc), "metadata") from None
        if not isinstance(value, dict):
            raise UploadRefused(
                422,
                ProblemCode.INVALID_METADATA,
                "The metadata must be a JSON object.",
                "metadata",
            )
        return media_type, raw

    def _check_csrf_seen(self) -> None:
        if CSRF_FIELD not in self.fields:
            raise _stale()

    # python-multipart's callbacks.
    def _part_begin(self) -> None:
        self._parts += 1
        if self._file_done or self._parts > len(FIELD_LIMITS) + 1:
            raise UploadRefused(
                422,
                ProblemCode.VALIDATION_FAILED,
                "The file must be the form's last field.",
                "file",
            )
        self._disposition = b""
        self._value.clear()

    def _header_field_data(self, data: bytes, start: int, end: int) -> None:
        self._header_field += data[start:end]

    def _header_value_data(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _header_end(self) -> None:
        if bytes(self._header_field).lower() == b"content-disposition":
            self._disposition = bytes(self._header_value)
        self._header_field.clear()
        self._header_value.clear()

    def _headers_finished(self) -> None:
        kind, options = parse_options_header(self._disposition)
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if kind != b"form-data" or not name:
            raise UploadRefused(400, ProblemCode.MALFORMED_MULTIPART, "A part has no name.")
        if self._parts == 1 and name != CSRF_FIELD:
            raise _stale()  # the token comes first: nothing else is read without it
        if name == "file":
            self._check_csrf_seen()
            self.filename = options.get(b"filename", b"").decode("utf-8", "replace")[:255]
            if not self.filename:
                raise UploadRefused(
                    422, ProblemCode.MISSING_FILE, "Choose a file to upload.", "file"
                )
            self._in_file = self.file_begun = True
        elif name not in FIELD_LIMITS or name in self.fields:
            raise UploadRefused(
                422, ProblemCode.VALIDATION_FAILED, "The form has a field it should not."
            )
        self._name = name

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._in_file:
            self._file_bytes += end - start
            if self._file_limit and self._file_bytes > self._file_limit:
                raise UploadRefused(
                    413,
                    ProblemCode.PAYLOAD_TOO_LARGE,
                    f"The file is larger than the {self.fields.get('media_type')} limit of "
                    f"{self._file_limit:,} bytes.",
                    "file",
                )
            self._pending.append(data[start:end])
            return
        self._value += data[start:end]
        assert self._name is not None
        if len(self._value) > FIELD_LIMITS[self._name]:
            if self._name == CSRF_FIELD:
                raise _stale()  # no token is that long: nothing more is read
            raise UploadRefused(
                413, ProblemCode.FIELD_TOO_LARGE, f"The {self._name} field is too long.", self._name
            )

    def _part_end(self) -> None:
        if self._in_file:
            self._in_file = False
            self._file_done = True
            return
        assert self._name is not None
        try:
            text = self._value.decode("utf-8")
        except UnicodeDecodeError:
            raise UploadRefused(
                422, ProblemCode.UNSAFE_INPUT, f"The {self._name} field is not UTF-8.", self._name
            ) from None
        if self._name == CSRF_FIELD and not self._session.csrf_matches(text):
            raise _stale()
        self.fields[self._name] = text

    def _end(self) -> None:
        self._ended = True


def _stale() -> Forbidden:
    return Forbidden(
        "The form is stale or did not come from this console; reload the page and send it again.",
        code=ProblemCode.CSRF_FAILED,
    )
