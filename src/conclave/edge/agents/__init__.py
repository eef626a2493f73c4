"""Intake agents, one per media type: pre-epistemic technical metadata, no interpretation."""
