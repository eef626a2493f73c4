"""Who is calling: bearer tokens from a static table, or HS256/RS256 JWTs (``sub`` = user id)."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

import jwt

from conclave.platform.errors import Forbidden, Unauthorized

ANONYMOUS = "anonymous"


@dataclass(frozen=True)
class Principal:
    """The authenticated caller. ``method`` is ``token``, ``jwt`` or ``none`` (auth disabled)."""

    user_id: str
    method: str


@dataclass(frozen=True)
class AuthConfig:
    """What the authenticator accepts. Build it from settings; empty means auth is off."""

    enabled: bool
    tokens: dict[str, str]
    jwt_secret: str = ""
    jwt_public_key: str = ""
    audience: str | None = None
    issuer: str | None = None


def parse_token_table(raw: str) -> dict[str, str]:
    """Parse ``token=user_id,token2=user_id2``; a malformed entry is a configuration error."""
    table: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        token, sep, user_id = entry.partition("=")
        if not sep or not token.strip() or not user_id.strip():
            raise ValueError("CONCLAVE_API_TOKENS entries must look like 'token=user_id'")
        table[token.strip()] = user_id.strip()
    return table


class Authenticator:
    """Turns an ``Authorization`` header into a :class:`Principal` or raises ``Unauthorized``."""

    def __init__(self, config: AuthConfig) -> None:
        self._config = config
        self._algorithms: list[str] = []
        if config.jwt_secret:
            self._algorithms.append("HS256")
        if config.jwt_public_key:
            self._algorithms.append("RS256")

    @property
    def enabled(self) -> bool:
        """Whether callers must present credentials."""
        return self._config.enabled

    def authenticate(self, authorization: str | None) -> Principal:
        """Check the header value; with auth disabled everyone is ``anonymous``."""
        if not self._config.enabled:
            return Principal(ANONYMOUS, "none")
        if not authorization:
            raise Unauthorized("Missing bearer token.", code="UNAUTHORIZED")
        scheme, _, credential = authorization.partition(" ")
        credential = credential.strip()
        if scheme.lower() != "bearer" or not credential:
            raise Unauthorized("Authorization must be 'Bearer <token>'.", code="UNAUTHORIZED")
        user_id = self._lookup_token(credential)
        if user_id is not None:
            return Principal(user_id, "token")
        if self._algorithms and credential.count(".") == 2:
            return Principal(self._decode_jwt(credential), "jwt")
        raise Unauthorized("Invalid bearer token.", code="INVALID_TOKEN")

    def acting_user(self, principal: Principal, claimed: str | None) -> str:
        """The user a request acts for: always the principal, except that with auth disabled a
        request may name its user; naming someone else with auth on is 403 ``USER_MISMATCH``."""
        if claimed is None:
            return principal.user_id
        if self._config.enabled and claimed != principal.user_id:
            raise Forbidden("user_id comes from your credentials.", code="USER_MISMATCH")
        return claimed

    def _lookup_token(self, credential: str) -> str | None:
        # Compare against every entry in constant time so timing does not reveal a prefix match.
        found: str | None = None
        for token, user_id in self._config.tokens.items():
            if hmac.compare_digest(token.encode(), credential.encode()):
                found = user_id
        return found

    def _decode_jwt(self, credential: str) -> str:
        try:
            header = jwt.get_unverified_header(credential)
            algorithm = header.get("alg")
            if algorithm not in self._algorithms:
                raise Unauthorized("Token algorithm not accepted.", code="INVALID_TOKEN")
            key = self._config.jwt_secret if algorithm == "HS256" else self._config.jwt_public_key
            claims = jwt.decode(
                credential,
                key,
                algorithms=[algorithm],
                audience=self._config.audience,
                issuer=self._config.issuer,
                options={
                    "require": ["sub", "exp"],
                    "verify_aud": self._config.audience is not None,
                },
            )
        except jwt.ExpiredSignatureError as exc:
            raise Unauthorized("Token expired.", code="TOKEN_EXPIRED") from exc
        except jwt.PyJWTError as exc:
            raise Unauthorized("Invalid bearer token.", code="INVALID_TOKEN") from exc
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise Unauthorized("Token has no subject.", code="INVALID_TOKEN")
        return subject
