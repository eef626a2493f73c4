"""Use cases of the edge service: take an upload through the guardrails, the intake agents and
the evidence store; report on the pipeline."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.edge import store
from conclave.edge.blobs import BlobStore, TempBlob
from conclave.edge.events import evidence_created
from conclave.edge.guardrails import (
    check_upload_headers,
    idempotency_key,
    optional_id,
    parse_metadata,
    sanitize_filename,
)
from conclave.edge.media import media_type_or_404, upload_limits
from conclave.edge.metrics import EdgeMetrics
from conclave.edge.multipart import MAX_FIELD_BYTES, Upload, boundary_of, read_upload
from conclave.edge.pack_log import pack_entry
from conclave.edge.parsing import ParserPool
from conclave.edge.records import IntakeError, NewEvidencePack, PackLeaf
from conclave.edge.sniff import Sniffed, is_built_in, sniff
from conclave.edge.thumbnails import Thumbnails
from conclave.platform import signing
from conclave.platform.auth import Principal
from conclave.platform.clock import rfc3339, utc_now
from conclave.platform.db.engine import store_errors
from conclave.platform.errors import ConclaveError, PayloadTooLarge, Unauthorized, Unprocessable
from conclave.platform.media_types import registered_media_types
from conclave.platform.problem_types import ProblemCode
from conclave.platform.runtime import Platform
from conclave.platform.tlog.log import TransparencyLog
from conclave.settings import EdgeSettings

RATE_WINDOW = timedelta(minutes=5)
ERROR_WINDOW = timedelta(hours=1)
_ERROR_RETENTION = timedelta(days=7)
_PRUNE_EVERY_SECONDS = 600.0
TEXT_FIELDS = ("correlation_id", "sampling_policy_ref", "idempotency_key")
"""Form fields besides ``metadata`` and the files; any other field is skipped unread."""
MAX_TEXT_FIELD_BYTES = 1024  # the ids are at most 256 characters


@dataclass(frozen=True)
class UploadCommand:
    """An upload as it arrives: route type, caller, headers that matter, and the body stream."""

    media_type: str
    principal: Principal
    content_type: str
    content_length: int | None
    body: AsyncIterator[bytes]
    correlation_id: str
    idempotency_key: str | None = None
    signature: str | None = None
    timestamp: str | None = None
    nonce: str | None = None


@dataclass(frozen=True)
class Signature:
    """A signed upload's checked headers (canonical signature, nonce) and the device's secret."""

    secret: str
    value: str
    nonce: str
    timestamp: str


@dataclass(frozen=True)
class UploadResult:
    """``created`` with the new packs, or ``duplicate`` with the packs of the original upload;
    each with the leaf hash of its entry in the log ``packs`` (if logged)."""

    status: str
    packs: list[PackLeaf]

    @property
    def evidence_ids(self) -> list[str]:
        """The packs' ids, in part order."""
        return [pack.evidence_id for pack in self.packs]

    @property
    def message(self) -> str:
        """The human summary the spec asks for."""
        count = len(self.evidence_ids)
        noun = "Evidence Pack" if count == 1 else "Evidence Packs"
        if self.status == "duplicate":
            return f"Duplicate upload: 0 Evidence Packs created; returning the original {count}."
        return f"{count} {noun} created."


class IntakeService:
    """The edge intake pipeline of one service process."""

    def __init__(
        self,
        settings: EdgeSettings,
        platform: Platform,
        blobs: BlobStore,
        parsers: ParserPool,
        metrics: EdgeMetrics,
        pack_log: TransparencyLog | None = None,
    ) -> None:
        self.settings = settings
        self.platform = platform
        self.blobs = blobs
        self.parsers = parsers
        self.thumbnails = Thumbnails(blobs.root, parsers, time_limit=settings.parse_timeout_seconds)
        self.metrics = metrics
        self.pack_log = pack_log
        """The log ``packs`` every new pack is queued for (``None`` with ``EDGE_PACK_LOG`` off)."""
        # The types are fixed for the life of the process: plug-ins are looked up once, here.
        self.media_types = registered_media_types()
        self.limits = upload_limits(self.media_types, settings.max_upload_bytes)
        # Beyond the setting (but under the ceiling) ``metadata`` is read whole and refused with
        # the specific METADATA_TOO_LARGE; the ceiling stops it early with FIELD_TOO_LARGE.
        self.field_limits = {
            "metadata": max(settings.max_metadata_bytes, MAX_FIELD_BYTES),
            **dict.fromkeys(TEXT_FIELDS, MAX_TEXT_FIELD_BYTES),
        }
        self.secrets = signing.parse_secret_table(settings.device_secrets.get_secret_value())
        self._last_prune = 0.0

    @property
    def engine(self) -> AsyncEngine:
        """The relational store."""
        return self.platform.engine

    def device_of(self, principal: Principal, metadata: dict[str, Any] | None = None) -> str:
        """The uploading device: the authenticated principal; with auth off, ``metadata.device_id``
        may name it."""
        if principal.method == "none" and metadata:
            claimed = metadata.get("device_id")
            if isinstance(claimed, str) and optional_id(claimed, "metadata.device_id"):
                return claimed
        return principal.user_id

    async def upload(self, command: UploadCommand) -> UploadResult:
        """Turn an upload into Evidence Packs (one per file part) and their events."""
        label = command.media_type if command.media_type in self.media_types else "unknown"
        started = time.perf_counter()
        try:
            result = await self._upload(command)
        except ConclaveError as exc:
            self.metrics.uploads.labels(label, "rejected").inc()
            self.metrics.rejections.labels(label, exc.code).inc()
            await self._record_error(label, exc, command.principal.user_id)
            raise
        self.metrics.uploads.labels(label, result.status).inc()
        self.metrics.upload_duration.labels(label).observe(time.perf_counter() - started)
        return result

    async def _upload(self, command: UploadCommand) -> UploadResult:
        media_type = media_type_or_404(command.media_type, self.media_types)
        check_upload_headers(
            {
                "Idempotency-Key": command.idempotency_key,
                "X-Conclave-Signature": command.signature,
                "X-Conclave-Timestamp": command.timestamp,
                "X-Conclave-Nonce": command.nonce,
            }
        )
        device = command.principal.user_id
        secret = self.secrets.get(device) if command.principal.method != "none" else None
        signature: Signature | None = None
        if secret is not None or self.settings.require_signature:
            if secret is None or not command.signature:
                raise Unauthorized(
                    "This device must sign its uploads.", code=ProblemCode.SIGNATURE_REQUIRED
                )
            signature = Signature(
                secret=secret,
                value=signing.canonical_signature(command.signature),
                nonce=signing.check_nonce(command.nonce),
                timestamp=command.timestamp or "",
            )
            window = self.settings.signature_window_seconds
            signing.check_timestamp(command.timestamp, time.time(), window)
        signed = signature is not None
        key = idempotency_key(command.idempotency_key)
        # With auth off the device is named in the body's metadata, not known yet: looking the
        # key up under the principal ("anonymous") would answer another device's upload.
        device_known = command.principal.method != "none"
        if key is not None and not signed and device_known:
            # Fast path: a retry of a completed upload is answered before its body is read.
            with store_errors():
                earlier = await store.idempotent_packs(self.engine, device, key)
            if earlier:
                return UploadResult("duplicate", earlier)
        boundary = boundary_of(command.content_type)
        limit = self.limits[media_type]
        most = limit * self.settings.max_files_per_request + MAX_FIELD_BYTES * 4
        if command.content_length is not None and command.content_length > most:
            raise PayloadTooLarge(
                f"The upload exceeds what the {media_type} route accepts.",
                code=ProblemCode.PAYLOAD_TOO_LARGE,
                extra={"limit_bytes": limit},
            )
        upload = await read_upload(
            command.body,
            boundary,
            self.blobs,
            max_file_bytes=limit,
            max_files=self.settings.max_files_per_request,
            field_limits=self.field_limits,
            hash_body=signed,
        )
        try:
            if signature is not None:
                signing.verify(
                    signature.secret,
                    upload.body_sha256,
                    signature.timestamp,
                    signature.value,
                    signature.nonce,
                )
                await self._use_signature(device, signature.value)
            return await self._ingest(media_type, command, upload, device, key)
        finally:
            upload.discard()

    async def _ingest(
        self,
        media_type: str,
        command: UploadCommand,
        upload: Upload,
        device: str,
        key: str | None,
    ) -> UploadResult:
        fields = upload.fields
        if not upload.files:
            raise Unprocessable(
                "The upload has no `file` part.",
                code=ProblemCode.MISSING_FILE,
                errors=[{"field": "file", "message": "required", "type": "missing"}],
            )
        metadata = parse_metadata(
            fields.get("metadata"),
            max_bytes=self.settings.max_metadata_bytes,
            max_depth=self.settings.max_json_depth,
        )
        device = self.device_of(command.principal, metadata)
        correlation = optional_id(fields.get("correlation_id"), "correlation_id")
        correlation = correlation or command.correlation_id or None
        policy = optional_id(fields.get("sampling_policy_ref"), "sampling_policy_ref")
        if key is None and (key := idempotency_key(fields.get("idempotency_key"))) is not None:
            with store_errors():
                earlier: list[PackLeaf] | None = await store.idempotent_packs(
                    self.engine, device, key
                )
            if earlier:
                return UploadResult("duplicate", earlier)
        analysed = []
        # One budget for all the files of the upload: sixteen files each made to take just under
        # the per-file time-out would otherwise hold a parser worker for minutes.
        deadline = time.monotonic() + self.settings.parse_request_seconds
        built_in = is_built_in(media_type)
        # A single file becomes its blob as soon as it is parsed (a small one by a thread here, a
        # larger one by the parser worker); the files of a larger upload only once all are parsed.
        single = len(upload.files) == 1
        for index, part in enumerate(upload.files):
            if part.blob.size == 0:
                raise Unprocessable(
                    f"File part {index} is empty.",
                    code=ProblemCode.EMPTY_FILE,
                    errors=[{"field": f"file[{index}]", "message": "empty"}],
                )
            # A built-in type is sniffed here, before a parser is taken; a plug-in's, in the worker.
            sniffed = sniff(media_type, part.blob.head, part.blob.size) if built_in else None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Unprocessable(
                    "Parsing the upload's files took longer than allowed in all.",
                    code=ProblemCode.PARSE_TIMEOUT,
                )
            started = time.perf_counter()
            fmt = sniffed.format if sniffed else ""
            time_limit = min(self.settings.parse_timeout_seconds, remaining)
            data = part.blob.data if single else None
            if data is not None:
                extracted = await self._parse_small(
                    media_type, part.blob, data, fmt, metadata, time_limit
                )
            else:
                extracted = await self.parsers.parse(
                    media_type,
                    str(part.blob.on_disk()),
                    fmt,
                    metadata,
                    time_limit=time_limit,
                    place_as=self.blobs.path_for(part.blob.sha256) if single else None,
                    fsync=self.blobs.fsync,
                )
            self.metrics.parse_duration.labels(media_type).observe(time.perf_counter() - started)
            if sniffed is None:  # a plug-in's type: sniffed in the worker (run_plugin)
                sniffed = Sniffed(extracted["format"], extracted["mime"])
                extracted, mime = extracted["facts"], sniffed.mime
            else:
                mime = extracted.pop("mime", None) or sniffed.mime
            analysed.append((part, sniffed.format, mime, extracted))
        for part, *_ in analysed if not single else ():
            # Blobs land before the rows that name them: a crash in between leaves an unreferenced
            # blob (harmless, content-addressed), never a pack whose content is missing.
            await self.blobs.store(part.blob)
        now = utc_now()
        packs = [
            NewEvidencePack(
                evidence_id=str(uuid.uuid4()),
                media_type=media_type,
                format=fmt,
                mime_type=mime,
                filename=sanitize_filename(part.filename),
                sha256=part.blob.sha256,
                size_bytes=part.blob.size,
                client_metadata=metadata,
                extracted=extracted,
                device_id=device,
                correlation_id=correlation,
                idempotency_key=key,
                part_index=index,
                sampling_policy_ref=policy,
                event_id=str(uuid.uuid4()),
                created_at=now,
                uploaded_by=command.principal.user_id,
            )
            for index, (part, fmt, mime, extracted) in enumerate(analysed)
        ]
        events = [evidence_created(pack) for pack in packs]
        # Queued in the packs' own transaction: no lock and no commit of their own on the upload's
        # path (the log's integrator gives them their indices within about a second).
        log = self.pack_log
        leaves = [log.queued(pack_entry(pack)) for pack in packs] if log is not None else []
        with store_errors():
            earlier = await store.append_packs(
                self.engine,
                packs,
                events,
                leaves,
                device_id=device,
                idempotency_key=key,
                writer=self.platform.writer,
            )
        if earlier:
            return UploadResult("duplicate", earlier)
        if not store.group_commits(self.engine):  # else the writer hands the events over
            self.platform.relay.wake()
        if log is not None:
            log.notify_queued()
        for pack in packs:
            self.metrics.packs.labels(media_type).inc()
            self.metrics.bytes.labels(media_type).inc(pack.size_bytes)
            self.metrics.file_size.labels(media_type).observe(pack.size_bytes)
        hashes: list[bytes | None] = [leaf.leaf_hash for leaf in leaves] or [None] * len(packs)
        return UploadResult(
            "created",
            [
                PackLeaf(pack.evidence_id, hashed)
                for pack, hashed in zip(packs, hashes, strict=True)
            ],
        )

    async def _parse_small(
        self,
        media_type: str,
        blob: TempBlob,
        data: bytes,
        fmt: str,
        metadata: dict[str, Any],
        time_limit: float,
    ) -> dict[str, Any]:
        """A single file small enough to be held in memory: the worker writes it beside its blob
        and parses it there, then a thread of this process makes it the blob (fsync, rename)
        while the worker already parses the next upload's file. Placed by the worker, each
        file's fsyncs kept a worker from parsing for about half of its time, and uploads queued
        for the two workers (docs/benchmarks.md)."""
        target = self.blobs.path_for(blob.sha256)
        beside = self.blobs.beside(target)
        extracted = await self.parsers.parse_bytes(
            media_type, data, beside, fmt, metadata, time_limit=time_limit, fsync=self.blobs.fsync
        )
        await self.blobs.place(beside, target)
        return extracted

    async def _use_signature(self, device: str, signature: str) -> None:
        # Keyed on the canonical signature, which covers body, timestamp and nonce: every spelling
        # of one captured request is the same key, and no two honest requests share one.
        with store_errors():
            fresh = await store.use_signature(self.engine, device, signature)
        if not fresh:
            raise Unauthorized(
                "This signed request was already used.", code=ProblemCode.REPLAYED_REQUEST
            )

    async def _record_error(self, label: str, exc: ConclaveError, device: str) -> None:
        # Best effort: the error figures must never turn a clear 4xx into something else.
        with contextlib.suppress(Exception):
            error = IntakeError(
                error_id=str(uuid.uuid4()),
                occurred_at=utc_now(),
                media_type=None if label == "unknown" else label,
                status=exc.status,
                code=exc.code,
                detail=exc.detail[:500],
                device_id=device,
            )
            await store.record_error(self.engine, error)
            if time.monotonic() - self._last_prune > _PRUNE_EVERY_SECONDS:
                self._last_prune = time.monotonic()
                now = utc_now()
                window = timedelta(seconds=self.settings.signature_window_seconds * 2)
                await store.prune(
                    self.engine, errors_before=now - _ERROR_RETENTION, nonces_before=now - window
                )

    async def pipeline(self) -> dict[str, Any]:
        """The pipeline figures (windows: :data:`RATE_WINDOW`, :data:`ERROR_WINDOW`)."""
        now = utc_now()
        with store_errors():
            figures = await store.pipeline_figures(
                self.engine, rate_since=now - RATE_WINDOW, errors_since=now - ERROR_WINDOW
            )
        by_type = {name: figures.by_type.get(name, 0) for name in self.media_types}
        last = figures.last_created_at
        return {
            "total_events": sum(by_type.values()),
            "ingestion_rate": round(figures.recent / (RATE_WINDOW.total_seconds() / 60), 3),
            "recent_errors": figures.errors,
            "windows": {
                "ingestion_rate": "events per minute, averaged over the last 300 s",
                "recent_errors": "uploads refused in the last 3600 s",
            },
            "by_type": by_type,
            "pending_outbox": figures.pending,
            "retrying_outbox": figures.failing,
            "quarantined_outbox": figures.quarantined,
            "last_event_at": rfc3339(last) if last else None,
            "last_errors": [
                {
                    "occurred_at": rfc3339(row.occurred_at),
                    "media_type": row.media_type,
                    "status": row.status,
                    "code": row.code,
                    "detail": row.detail,
                }
                for row in figures.last_errors
            ],
            "bus": "connected" if self.platform.relay.bus_healthy else "disconnected",
        }
