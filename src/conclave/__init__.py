"""Conclave: governed AI tool execution and evidence intake."""

__version__ = "0.1.0"
