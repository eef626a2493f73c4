"""The bus channel the edge publishes on, and the event of one new Evidence Pack."""

from __future__ import annotations

CHANNEL = "edge_intake.evidence.created"
"""One event per Evidence Pack, written to the outbox in the pack's transaction."""
SOURCE = "edge"
