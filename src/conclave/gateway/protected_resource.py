"""The gateway as an OAuth 2.1 protected resource (MCP authorization; RFC 9728, RFC 6750).

A client that meets a 401 reads ``resource_metadata`` from its ``WWW-Authenticate`` challenge,
fetches that document, learns which authorization server issues tokens for the gateway and which
resource URL to ask it for (RFC 8707 ``resource``), and comes back with a JWT whose ``aud`` is that
URL. The document is served at ``/.well-known/oauth-protected-resource/mcp`` (the path-suffixed
form MCP clients try first) and at ``/.well-known/oauth-protected-resource``: the REST routes and
``/mcp`` are one resource and accept the same tokens.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from conclave.gateway.mcp import MCP_PATH
from conclave.platform.errors import ConclaveError, Unauthorized, bearer_challenge
from conclave.platform.problems import error_response
from conclave.settings import GatewaySettings

WELL_KNOWN_PATH = "/.well-known/oauth-protected-resource"
_CACHE_CONTROL = "public, max-age=300"


class ProtectedResource:
    """What the gateway tells OAuth clients about itself, from settings."""

    def __init__(self, settings: GatewaySettings) -> None:
        self._resource_url = settings.resource_url
        servers = settings.authorization_servers or (
            [settings.jwt_issuer] if settings.jwt_issuer else []
        )
        self._authorization_servers = servers
        self._scopes = settings.oauth_scopes

    def resource_url(self, request: Request) -> str:
        """The gateway's MCP endpoint URL: ``GATEWAY_RESOURCE_URL``, else the URL this request
        reached the gateway at (its Host header passed the allowed-hosts guard)."""
        if self._resource_url is not None:
            return self._resource_url
        return str(request.base_url).rstrip("/") + MCP_PATH

    def metadata_url(self, request: Request) -> str:
        """Where the metadata of :meth:`resource_url` is (RFC 9728 §3.1: the well-known segment
        goes between the host and the resource's path)."""
        parts = urlsplit(self.resource_url(request))
        path = parts.path.rstrip("/")
        return f"{parts.scheme}://{parts.netloc}{WELL_KNOWN_PATH}{path}"

    def document(self, request: Request) -> dict[str, Any]:
        """The RFC 9728 metadata document. No ``jwks_uri``: the gateway signs nothing a client
        would verify (that member names the resource's own keys, not the issuer's)."""
        document: dict[str, Any] = {
            "resource": self.resource_url(request),
            "bearer_methods_supported": ["header"],
            "resource_name": "Conclave tool gateway",
        }
        if self._authorization_servers:
            document["authorization_servers"] = list(self._authorization_servers)
        if self._scopes:
            document["scopes_supported"] = list(self._scopes)
        return document

    def challenged(self, request: Request, error: ConclaveError) -> ConclaveError:
        """``error`` with the resource's metadata URL in its challenge, when it is a 401."""
        if isinstance(error, Unauthorized):
            # A Host header a wildcard allowed may hold what a quoted string cannot.
            url = self.metadata_url(request).replace("\\", "%5C").replace('"', "%22")
            parameters = f'resource_metadata="{url}"'
            if self._scopes:
                parameters += f', scope="{" ".join(self._scopes)}"'
            error.headers["WWW-Authenticate"] = bearer_challenge(
                error.code, error.detail, parameters=parameters
            )
        return error


def install_protected_resource(app: FastAPI, resource: ProtectedResource) -> None:
    """Serve the metadata and put ``resource_metadata`` into every 401 of ``app``'s routes."""
    router = APIRouter(tags=["oauth"])

    async def metadata(request: Request) -> JSONResponse:
        return JSONResponse(resource.document(request), headers={"Cache-Control": _CACHE_CONTROL})

    for path in (WELL_KNOWN_PATH + MCP_PATH, WELL_KNOWN_PATH):
        router.add_api_route(
            path,
            metadata,
            methods=["GET"],
            summary="OAuth protected resource metadata (RFC 9728)",
            description="Which authorization servers issue tokens for the gateway and the "
            "resource URL (token audience) to ask them for.",
            response_class=JSONResponse,
        )
    app.include_router(router)

    async def unauthorized(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Unauthorized)
        return error_response(resource.challenged(request, exc), request.url.path)

    # Found before the platform's ConclaveError handler (handlers are looked up by class), by the
    # router and by the fast lane of POST /execute alike.
    app.add_exception_handler(Unauthorized, unauthorized)
