"""``EdgeClient``: uploads one local file to the edge intake service."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from pydantic import SecretStr

from conclave import __version__
from conclave.edge_client.envelope import check_metadata, check_source_type
from conclave.edge_client.errors import ReceiptUnavailable, ServerUnreachable, UploadFailed
from conclave.edge_client.multipart import MultipartFileBody
from conclave.platform.inputs import holds_unsafe
from conclave.platform.problem_types import ProblemCode
from conclave.platform.signing import sign
from conclave.platform.transparency.receipt import MAX_DOCUMENT_BYTES

UPLOAD_PATH = "/api/edge-intake/{source_type}"
# 408, 425 and 429 say "not now", and 5xx is the server's own trouble: the same request may
# succeed later. Every other 4xx will fail again until someone changes something.
_TRANSIENT_STATUSES = frozenset({408, 425, 429})


RECEIPT_PATH = re.compile(r"/logs/[a-z0-9][a-z0-9_-]{0,63}/receipt/by-hash/([0-9a-f]{64})")
"""What a receipt link in an upload's answer may be: the client fetches nothing else."""
# Not yet under a signed checkpoint (about a second after the upload): asked again shortly.
_NOT_YET = frozenset({ProblemCode.LEAF_NOT_FOUND.value, ProblemCode.BEYOND_LOG.value})
MAX_ANSWER_BYTES = MAX_DOCUMENT_BYTES
"""How much of an upload's answer is read (a few hundred bytes per pack): a larger one is an
unusable answer, like a 200 without evidence ids."""


@dataclass(frozen=True)
class ReceiptLink:
    """Where the receipt of one Evidence Pack's leaf in the server's log ``packs`` is served."""

    evidence_id: str
    log_leaf_hash: str
    """The leaf hash of the pack's entry (64 hex digits): the receipt must be of this leaf."""
    path: str
    """``/logs/packs/receipt/by-hash/<log_leaf_hash>``, relative to the server."""


@dataclass(frozen=True)
class SentFile:
    """What the client sent of one file: the SHA-256 (hex) and size of its bytes. The log's
    entry of the file's pack must name these."""

    sha256: str
    size_bytes: int


@dataclass(frozen=True)
class UploadResult:
    """The server's answer to an accepted upload (``status`` is ``created`` or ``duplicate``),
    with the links to its packs' receipts (none from a server without the log), and ``files``:
    what was sent, in the upload's order (the file's position is its pack's ``part_index``)."""

    status: str
    evidence_ids: list[str]
    message: str = ""
    receipts: list[ReceiptLink] = field(default_factory=list)
    files: list[SentFile] = field(default_factory=list)


def _secret(value: str | SecretStr | None) -> str | None:
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    return value or None


class EdgeClient:
    """HTTP client of the edge intake service.

    ``token`` becomes ``Authorization: Bearer <token>`` (no header without one). ``timeout``
    applies to connecting, reading and writing each. With ``signing_secret`` every upload carries
    an HMAC-SHA256 signature over the body's SHA-256, a timestamp and a fresh nonce.
    ``device_id`` is the id the server knows this device by when it names it by its token's user
    (``CONCLAVE_API_TOKENS=token=device_id``); the client checks the log's entries of its packs
    against it (:meth:`device_named`).
    ``transport`` or ``http_client`` replace the network (tests pass ``httpx.ASGITransport``).
    Use as ``async with EdgeClient(...) as client``.
    """

    def __init__(
        self,
        base_url: str,
        token: str | SecretStr | None = None,
        timeout: float = 30.0,
        *,
        signing_secret: str | SecretStr | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.time,
        device_id: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.device_id = device_id or None
        self._token = _secret(token)
        self._signing_secret = _secret(signing_secret)
        self._clock = clock
        self._timeout = timeout
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout),
            transport=transport,
            headers={"User-Agent": f"conclave-edge-client/{__version__}"},
        )

    async def __aenter__(self) -> EdgeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool (unless the HTTP client was handed in)."""
        if self._owns_http:
            await self._http.aclose()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def device_named(self, metadata: dict[str, Any]) -> str | None:
        """The id the server names the device of an upload with ``metadata`` by, as far as the
        client can know: the ``device_id`` the client was given; else, sending no token (the
        server's auth is off), the upload's ``metadata.device_id``; else ``None`` (the server
        names the device by its token's user, which the client was not told)."""
        if self.device_id is not None:
            return self.device_id
        named = metadata.get("device_id")
        return named if self._token is None and isinstance(named, str) else None

    async def health(self) -> bool:
        """True when ``GET /health`` answers 200 (server up with its store, bus and blobs)."""
        try:
            response = await self._http.get(f"{self.base_url}/health", headers=self._headers())
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def upload(
        self,
        source_type: str,
        path: str | Path,
        metadata: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        sampling_policy_ref: str | None = None,
        idempotency_key: str | None = None,
    ) -> UploadResult:
        """Send one file; return the evidence ids, or raise :class:`UploadFailed`.

        The file is streamed, never read into memory. Send the same ``idempotency_key`` when
        repeating an upload whose answer was lost: the server then returns the ids of the first
        one (``status="duplicate"``) and creates nothing.
        """
        check_source_type(source_type)
        check_metadata(metadata or {})
        fields = {"metadata": json.dumps(metadata or {}, allow_nan=False)}
        if correlation_id:
            fields["correlation_id"] = correlation_id
        if sampling_policy_ref:
            fields["sampling_policy_ref"] = sampling_policy_ref
        try:
            body = MultipartFileBody(fields, Path(path))
            headers = {
                **self._headers(),
                "Content-Type": body.content_type,
                "Content-Length": str(body.length),
            }
            if idempotency_key:
                headers["Idempotency-Key"] = idempotency_key
            if self._signing_secret:
                headers.update(self._signature(body.sha256()))
        except OSError as exc:
            raise UploadFailed(f"Local file unusable: {exc}", transient=False) from exc
        url = self.base_url + UPLOAD_PATH.format(source_type=source_type)
        try:
            response = await self._post(url, body, headers)
        except (httpx.TimeoutException, TimeoutError) as exc:
            raise UploadFailed(f"Timed out: {type(exc).__name__}", transient=True) from exc
        except httpx.TransportError as exc:
            raise UploadFailed(
                f"Connection failed: {type(exc).__name__}: {exc}", transient=True
            ) from exc
        except OSError as exc:
            raise UploadFailed(f"Local file unusable: {exc}", transient=False) from exc
        result = _result(response)
        try:
            # What went out; read again only if the server answered before taking it all.
            sha256 = body.streamed_sha256() or body.file_sha256()
        except OSError as exc:
            raise UploadFailed(f"Local file unusable: {exc}", transient=False) from exc
        return replace(result, files=[SentFile(sha256, body.file_size)])

    async def receipt(self, path: str) -> bytes | None:
        """The receipt served at ``path`` (a :class:`ReceiptLink`'s), or ``None`` while the
        checkpoint covering its leaf is not signed yet (404 ``LEAF_NOT_FOUND`` or
        ``BEYOND_LOG``: ask again in a moment). :class:`ReceiptUnavailable` otherwise, also for
        an answer larger than a receipt can be (read no further), :class:`ServerUnreachable`
        when no answer came."""
        if not RECEIPT_PATH.fullmatch(path):
            raise ReceiptUnavailable(f"not a receipt path of the server: {path[:100]!r}")
        response = await self._get(path)
        if response.status_code == 200:
            return response.content
        code = _code(response)
        if response.status_code == 404 and code in _NOT_YET:
            return None
        raise ReceiptUnavailable(f"HTTP {response.status_code} {code or ''}".strip())

    async def leaf(self, receipt_path: str, index: int) -> bytes:
        """The answer of ``GET /logs/<log>/leaves/<index>`` (a :class:`ReceiptLink`'s log): the
        JSON of the leaf's data and hash, served to the device that uploaded the pack. Read up
        to 2 MiB; :class:`ReceiptUnavailable` for anything but a 200 answer, and
        :class:`ServerUnreachable` when no answer came."""
        if not RECEIPT_PATH.fullmatch(receipt_path):
            raise ReceiptUnavailable(f"not a receipt path of the server: {receipt_path[:100]!r}")
        if isinstance(index, bool) or not 0 <= index < 2**63:
            raise ReceiptUnavailable(f"not a leaf index: {index!r}"[:120])
        log = receipt_path.split("/")[2]
        response = await self._get(f"/logs/{log}/leaves/{index}")
        if response.status_code != 200:
            raise ReceiptUnavailable(f"HTTP {response.status_code} {_code(response) or ''}".strip())
        return response.content

    async def log_keys(self, name: str = "packs") -> str:
        """The JSON document of ``GET /logs/{name}/keys``: the log's verifier keys as the server
        publishes them (:func:`conclave.edge_client.receipts.verifier_keys` reads it)."""
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", name):
            raise ReceiptUnavailable(f"not a log name: {name[:100]!r}")
        response = await self._get(f"/logs/{name}/keys")
        if response.status_code != 200:
            raise ReceiptUnavailable(f"HTTP {response.status_code} {_code(response) or ''}")
        return response.text

    async def _post(
        self, url: str, body: MultipartFileBody, headers: dict[str, str]
    ) -> httpx.Response:
        """The answer to the upload, its body read up to :data:`MAX_ANSWER_BYTES` within
        ``timeout`` seconds of its headers (the per-read time-out alone lets a body that drips
        in just under it hold the sync run for ever). Sending the file has no overall deadline:
        a large file over a slow link takes what it takes."""
        async with self._http.stream("POST", url, content=body.stream(), headers=headers) as answer:
            async with asyncio.timeout(self._timeout):
                content = await _read_bounded(answer, MAX_ANSWER_BYTES)
        if content is None:
            raise UploadFailed(
                f"HTTP {answer.status_code}: an answer larger than {MAX_ANSWER_BYTES} bytes",
                transient=True,
                status=answer.status_code,
            )
        return _as_read(answer, content)

    async def _get(self, path: str, limit: int = MAX_DOCUMENT_BYTES) -> httpx.Response:
        """The answer to ``GET path``, its body read up to ``limit`` bytes (a server, or whatever
        answers in its place, may send any amount), the whole request within ``timeout``
        seconds (:class:`ServerUnreachable` past it)."""
        try:
            async with asyncio.timeout(self._timeout):
                async with self._http.stream(
                    "GET", self.base_url + path, headers=self._headers()
                ) as response:
                    content = await _read_bounded(response, limit)
        except (httpx.HTTPError, TimeoutError) as exc:
            raise ServerUnreachable(f"Connection failed: {type(exc).__name__}") from exc
        if content is None:
            raise ReceiptUnavailable(f"an answer larger than {limit} bytes")
        return _as_read(response, content)

    def _signature(self, body_sha256: str) -> dict[str, str]:
        timestamp = str(int(self._clock()))
        # A fresh nonce per attempt: the server refuses a nonce (or signature) it has seen, and a
        # retry of the same body within one second would otherwise repeat the signature.
        nonce = secrets.token_hex(16)
        secret = self._signing_secret or ""
        return {
            "X-Conclave-Timestamp": timestamp,
            "X-Conclave-Nonce": nonce,
            "X-Conclave-Signature": sign(secret, body_sha256, timestamp, nonce),
        }


async def _read_bounded(response: httpx.Response, limit: int) -> bytes | None:
    """The body of ``response``, or ``None`` once it passes ``limit`` bytes (read no further)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _as_read(response: httpx.Response, content: bytes) -> httpx.Response:
    # The body as read (decoded): only the headers that still describe it are kept.
    kept = {
        name: response.headers[name]
        for name in ("content-type", "retry-after")
        if name in response.headers
    }
    return httpx.Response(response.status_code, headers=kept, content=content)


def _json(response: httpx.Response) -> Any:
    """The answer's JSON, or ``None`` for a body that is not JSON or is nested too deeply for
    the interpreter's stack (a server, or whatever answers in its place, may send either)."""
    try:
        return response.json()
    except (ValueError, RecursionError):
        return None


def _result(response: httpx.Response) -> UploadResult:
    status = response.status_code
    body = _json(response)
    ids = body.get("evidence_ids") if isinstance(body, dict) else None
    # An id no store can carry (a lone surrogate, NUL) would fail the outbox's write and leave
    # the item claimed: the answer is unusable, like one without ids.
    if status == 200 and isinstance(ids, list) and not holds_unsafe(ids):
        ids = [str(i) for i in ids]
        return UploadResult(
            status=str(body.get("status", "")),
            evidence_ids=ids,
            message=str(body.get("message", "")),
            receipts=_receipt_links(body.get("receipts"), ids),
        )
    code = body.get("code") if isinstance(body, dict) else None
    code = code if isinstance(code, str) else None
    detail = body.get("detail") if isinstance(body, dict) else None
    if status == 200:
        detail = "the server answered 200 without usable evidence ids"
    label = f"HTTP {status} {code}" if code else f"HTTP {status}"
    # Cut short: the item keeps it as its last error, and an answer may hold 2 MiB of it.
    message = f"{label}: {detail or response.reason_phrase}"[:500]
    raise UploadFailed(
        message,
        # A 200 without ids is a broken proxy or server; asking again later is the best bet.
        transient=status >= 500 or status in _TRANSIENT_STATUSES or status == 200,
        status=status,
        code=code,
        retry_after=_retry_after(response.headers.get("Retry-After")),
    )


def _receipt_links(found: Any, evidence_ids: list[str]) -> list[ReceiptLink]:
    """The answer's receipt links that are what the server promises (a link of one of the
    upload's packs, to the receipt of the leaf hash it names); anything else is left out, and
    only the first link of a pack is kept."""
    wanted = set(evidence_ids)
    links = []
    for entry in found if isinstance(found, list) else []:
        if not isinstance(entry, dict):
            continue
        evidence_id, hashed, path = (
            entry.get(k) for k in ("evidence_id", "log_leaf_hash", "receipt")
        )
        if evidence_id not in wanted or not isinstance(path, str):
            continue
        match = RECEIPT_PATH.fullmatch(path)
        if match is not None and match.group(1) == hashed:
            links.append(ReceiptLink(str(evidence_id), match.group(1), path))
            wanted.discard(evidence_id)
    return links


def _code(response: httpx.Response) -> str | None:
    body = _json(response)
    code = body.get("code") if isinstance(body, dict) else None
    return code if isinstance(code, str) else None


def _retry_after(value: str | None) -> float | None:
    # Only the delay-seconds form; an HTTP date from a proxy is rare enough to fall back to backoff.
    if value and value.strip().isdigit():
        return float(value.strip())
    return None
