"""Upstream MCP servers as a governed tool source (docs/gateway.md, "Upstream MCP servers")."""
