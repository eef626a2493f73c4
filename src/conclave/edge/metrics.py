"""Prometheus metrics of the edge service (``conclave_edge_*``); label values are bounded."""

from __future__ import annotations

from conclave.platform.metrics import ServiceMetrics

_SIZE_BUCKETS = tuple(float(4**n * 1024) for n in range(12))  # 1 KiB .. 4 GiB


class EdgeMetrics(ServiceMetrics):
    """HTTP metrics plus uploads, packs, bytes, rejections and parse time per media type."""

    def __init__(self) -> None:
        super().__init__("edge")
        self.uploads = self.counter(
            "uploads_total", "Upload requests by media type and outcome.", ["media_type", "outcome"]
        )
        self.packs = self.counter(
            "evidence_packs_total", "Evidence Packs created by media type.", ["media_type"]
        )
        self.bytes = self.counter(
            "ingested_bytes_total", "Bytes stored in Evidence Packs by media type.", ["media_type"]
        )
        self.rejections = self.counter(
            "rejections_total",
            "Refused uploads by media type and error code.",
            ["media_type", "code"],
        )
        self.file_size = self.histogram(
            "file_size_bytes", "Size of accepted files.", ["media_type"], buckets=_SIZE_BUCKETS
        )
        self.parse_duration = self.histogram(
            "parse_duration_seconds", "Time an intake agent spent on one file.", ["media_type"]
        )
        self.upload_duration = self.histogram(
            "upload_duration_seconds",
            "Upload request time until the packs committed.",
            ["media_type"],
        )
