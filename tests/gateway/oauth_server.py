"""A minimal OAuth 2.1 authorization server for the gateway's resource-server tests.

It serves what an MCP client needs to complete a flow, and no more: authorization server metadata
(RFC 8414), dynamic client registration (RFC 7591), an authorization endpoint that approves at
once (redirecting with a code), a token endpoint checking PKCE (S256) and issuing a JWT signed with
its current key, and the JWKS its keys are published in. The tests change its keys (rotation), take
its JWKS down, and count how often the JWKS was fetched.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


@dataclass
class SigningKey:
    """A private key, its key id and the algorithm it signs with."""

    kid: str
    algorithm: str
    private: PrivateKey

    @classmethod
    def rsa(cls, kid: str) -> SigningKey:
        return cls(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))

    @classmethod
    def ec(cls, kid: str) -> SigningKey:
        return cls(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))

    @classmethod
    def ed25519(cls, kid: str) -> SigningKey:
        return cls(kid, "EdDSA", ed25519.Ed25519PrivateKey.generate())

    def jwk(self) -> dict[str, Any]:
        """The public half as a JWK, as an issuer publishes it."""
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            data = RSAAlgorithm.to_jwk(public, as_dict=True)
        elif isinstance(public, ec.EllipticCurvePublicKey):
            data = ECAlgorithm.to_jwk(public, as_dict=True)
        else:
            data = OKPAlgorithm.to_jwk(public, as_dict=True)
        return {**data, "kid": self.kid, "use": "sig"}

    def sign(self, claims: dict[str, Any], **header: Any) -> str:
        return jwt.encode(
            claims, self.private, algorithm=self.algorithm, headers={"kid": self.kid, **header}
        )


@dataclass
class AuthorizationServer:
    """The server's state; :meth:`app` serves it. ``issuer`` is set once it listens."""

    keys: list[SigningKey]
    issuer: str = ""
    jwks_up: bool = True
    jwks_held: asyncio.Event | None = None
    """An event JWKS requests wait for before they are answered (a slow issuer)."""
    jwks_fetches: int = 0
    tokens_issued: list[dict[str, Any]] = field(default_factory=list)
    _clients: dict[str, dict[str, Any]] = field(default_factory=dict)
    _codes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def token(self, audience: str | None, *, key: SigningKey | None = None, **claims: Any) -> str:
        """A JWT as the token endpoint issues it, for ``audience`` (claims may be overridden)."""
        now = int(time.time())
        body = {"iss": self.issuer, "sub": "ada", "iat": now, "exp": now + 300, **claims}
        if audience is not None:
            body["aud"] = audience
        return (key or self.keys[0]).sign(body)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/.well-known/oauth-authorization-server", self._metadata),
                Route("/jwks", self._jwks),
                Route("/register", self._register, methods=["POST"]),
                Route("/authorize", self._authorize),
                Route("/token", self._token, methods=["POST"]),
            ]
        )

    async def _metadata(self, _request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
                "registration_endpoint": f"{self.issuer}/register",
                "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none", "client_secret_post"],
            }
        )

    async def _jwks(self, _request: Request) -> Response:
        self.jwks_fetches += 1
        if self.jwks_held is not None:
            await self.jwks_held.wait()
        if not self.jwks_up:
            return JSONResponse({"error": "down"}, status_code=503)
        return JSONResponse({"keys": [key.jwk() for key in self.keys]})

    async def _register(self, request: Request) -> Response:
        metadata = await request.json()
        client = {
            **metadata,
            "client_id": secrets.token_urlsafe(8),
            "client_id_issued_at": int(time.time()),
            "token_endpoint_auth_method": "none",
        }
        self._clients[client["client_id"]] = client
        return JSONResponse(client, status_code=201)

    async def _authorize(self, request: Request) -> Response:
        query = request.query_params
        client = self._clients.get(query.get("client_id", ""))
        if client is None or query.get("redirect_uri") not in client["redirect_uris"]:
            return JSONResponse({"error": "invalid_client"}, status_code=400)
        code = secrets.token_urlsafe(16)
        self._codes[code] = dict(query)
        location = f"{query['redirect_uri']}?{urlencode({'code': code, 'state': query['state']})}"
        return RedirectResponse(location, status_code=302)

    async def _token(self, request: Request) -> Response:
        form = await request.form()
        grant = self._codes.pop(str(form.get("code")), None)
        verifier = str(form.get("code_verifier", ""))
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        if (
            grant is None
            or grant["client_id"] != form.get("client_id")
            or grant["code_challenge"] != challenge.rstrip(b"=").decode()
        ):
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        # The audience is the resource the client asked for (RFC 8707), as real servers do.
        resource = str(form.get("resource") or grant.get("resource") or "")
        self.tokens_issued.append({"resource": resource, "scope": grant.get("scope")})
        return JSONResponse(
            {
                "access_token": self.token(resource or None),
                "token_type": "Bearer",
                "expires_in": 300,
            }
        )
