"""Who is calling: bearer tokens from a static table, or JWTs (``sub`` = user id) signed with a
configured HS256 secret or RS256 key, or with a key an issuer publishes at its JWKS URL
(:mod:`conclave.platform.jwks`).

A principal carries roles. Two are built in: ``operator`` (sees and acts on every user's
resources) and ``service`` (another Conclave service, such as the gateway, that may act on behalf
of the user who called it by naming that user, percent-encoded, in the ``X-Conclave-Acting-User``
header). A deployment declares its own (``CONCLAVE_ROLES``): they mean only what the gateway's
tool policy says of them, so code that grants a privilege asks for the one role it needs, never
whether a caller has any. Roles come from settings (lists of user ids) and, for JWTs, from a
claim (``roles`` by default: a list of names or one space-separated string; names this
deployment does not know are dropped). With auth disabled everyone is ``anonymous`` with the
operator role.
"""

from __future__ import annotations

import hmac
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

import jwt

from conclave.platform.errors import Forbidden, Unauthorized, Unavailable
from conclave.platform.inputs import find_unsafe
from conclave.platform.jwks import JwksKeys, JwksUnavailable
from conclave.platform.problem_types import ProblemCode

ANONYMOUS = "anonymous"
OPERATOR = "operator"
SERVICE = "service"
BUILT_IN_ROLES = frozenset({OPERATOR, SERVICE})
"""The roles Conclave's own code acts on; a deployment's declared roles come beside them."""
ACTING_USER_HEADER = "X-Conclave-Acting-User"
"""Header naming, percent-encoded UTF-8 (:func:`acting_user_header_value`), the user a service
principal acts for."""
MAX_USER_ID_LENGTH = 256  # the width of every column that records who asked (requested_by, …)
RESERVED_USER_IDS = frozenset({"bridge"})
"""Ids that name Conclave's own processes where a user id would stand (the collector records the
Evidence bridge's expeditions as requested by ``bridge``): no token, JWT or acting-user header may
claim one, or that user would own what the process does."""
_TIME_CLAIMS = ("exp", "iat", "nbf")


@dataclass(frozen=True)
class Principal:
    """The authenticated caller. ``method`` is ``token``, ``jwt`` or ``none`` (auth disabled).
    ``on_behalf_of`` names the service principal that authenticated and acts for ``user_id``."""

    user_id: str
    method: str
    roles: frozenset[str] = frozenset()
    on_behalf_of: str | None = None

    @property
    def is_operator(self) -> bool:
        """Whether this caller may see and act on every user's resources."""
        return OPERATOR in self.roles


@dataclass(frozen=True)
class AuthConfig:
    """What the authenticator accepts. Build it from settings; empty means auth is off."""

    enabled: bool
    tokens: dict[str, str]
    jwt_secret: str = ""
    jwt_public_key: str = ""
    audience: str | None = None
    issuer: str | None = None
    operators: frozenset[str] = frozenset()
    services: frozenset[str] = frozenset()
    roles_claim: str = "roles"
    max_token_lifetime_seconds: float = 86_400.0
    declared_roles: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """The deployment's own roles (``CONCLAVE_ROLES``), each with the users settings give it."""


def parse_token_table(raw: str) -> dict[str, str]:
    """Parse ``token=user_id,token2=user_id2``; a malformed entry is a configuration error."""
    table: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        token, sep, user_id = entry.partition("=")
        if not sep or not token.strip() or not user_id.strip():
            raise ValueError("CONCLAVE_API_TOKENS entries must look like 'token=user_id'")
        if user_id_problem(user_id.strip()) is not None:
            raise ValueError(f"CONCLAVE_API_TOKENS user id {user_id.strip()!r} is not usable")
        table[token.strip()] = user_id.strip()
    return table


def acting_user_header_value(user_id: str) -> str:
    """``user_id`` as the value of :data:`ACTING_USER_HEADER`: percent-encoded UTF-8, so any
    user id (``José``, ``ann@example.org``) survives HTTP's latin-1 headers unchanged."""
    return quote(user_id, safe="@.-_~+")


def _is_control(character: str) -> bool:
    code = ord(character)  # C0, DEL and C1 (U+0080-U+009F, which latin-1 bytes decode to)
    return code < 0x20 or 0x7F <= code <= 0x9F


_PERCENT_ENCODED = re.compile(r"(?:[!-$&-~]|%[0-9A-Fa-f]{2})*")
"""Printable ASCII where every ``%`` starts an escape of two hexadecimal digits."""


def user_id_problem(user_id: str) -> str | None:
    """Why ``user_id`` cannot identify a user (empty, too long, control characters, text that
    cannot be stored), or ``None`` when it can."""
    if not user_id:
        return "is empty"
    if user_id in RESERVED_USER_IDS:
        return "is reserved for Conclave's own processes"
    if len(user_id) > MAX_USER_ID_LENGTH:
        return f"is longer than {MAX_USER_ID_LENGTH} characters"
    if find_unsafe(user_id) is not None or any(_is_control(c) for c in user_id):
        return "holds characters that cannot be stored"
    return None


class Authenticator:
    """Turns an ``Authorization`` header into a :class:`Principal` or raises ``Unauthorized``.

    With ``jwks`` (an issuer's published keys), call :meth:`authenticate_async`: it fetches the
    keys a token needs, off the event loop's critical path, before judging it; the synchronous
    :meth:`authenticate` judges with the keys already cached."""

    def __init__(self, config: AuthConfig, jwks: JwksKeys | None = None) -> None:
        self._config = config
        self._jwks = jwks
        self._algorithms: list[str] = []
        if config.jwt_secret:
            self._algorithms.append("HS256")
        if config.jwt_public_key:
            self._algorithms.append("RS256")
        if BUILT_IN_ROLES & set(config.declared_roles):
            # Members of a declared "operator" would be operators without CONCLAVE_OPERATORS.
            raise ValueError("a declared role cannot take the name of a built-in one")
        self._known_roles = BUILT_IN_ROLES | frozenset(config.declared_roles)
        members: dict[str, set[str]] = {}
        for role, users in config.declared_roles.items():
            for user in users:
                members.setdefault(user, set()).add(role)
        self._declared_roles_of = {user: frozenset(roles) for user, roles in members.items()}

    @property
    def enabled(self) -> bool:
        """Whether callers must present credentials."""
        return self._config.enabled

    @property
    def known_roles(self) -> frozenset[str]:
        """The roles a caller can hold here: the built-in ones and the deployment's own."""
        return self._known_roles

    def authenticate(self, authorization: str | None, acting_user: str | None = None) -> Principal:
        """Check the header value; with auth disabled everyone is ``anonymous`` (an operator).

        ``acting_user`` is the value of the ``X-Conclave-Acting-User`` header: a principal with
        the ``service`` role becomes that user (with the user's roles from settings); anyone else
        naming another user is 403 ``ACTING_USER_FORBIDDEN`` (naming oneself changes nothing)."""
        if not self._config.enabled:
            # No identities to protect: a caller may name its user, and everyone sees everything.
            user = self._checked_acting_user(acting_user) if acting_user else ANONYMOUS
            return Principal(user, "none", frozenset({OPERATOR}))
        principal = self._authenticated(authorization)
        if acting_user is None:
            return principal
        user = self._checked_acting_user(acting_user)
        if user == principal.user_id:
            return principal  # naming oneself acts for no one else
        if SERVICE not in principal.roles:
            raise Forbidden(
                f"Only service identities may send {ACTING_USER_HEADER}.",
                code=ProblemCode.ACTING_USER_FORBIDDEN,
            )
        return Principal(user, principal.method, self._settings_roles(user), principal.user_id)

    async def authenticate_async(
        self, authorization: str | None, acting_user: str | None = None
    ) -> Principal:
        """:meth:`authenticate`, after fetching the issuer's keys when the token's key id is
        unknown or the cached set is stale (at most once per minimum interval, see
        :mod:`conclave.platform.jwks`). 503 ``AUTH_KEYS_UNAVAILABLE`` while no key set could ever
        be fetched."""
        if self._jwks is not None and self._config.enabled:
            is_jwt, kid = _unverified_key_id(authorization)
            if is_jwt:
                await self._jwks.refresh_for(kid)
        return self.authenticate(authorization, acting_user)

    async def aclose(self) -> None:
        """Release what the authenticator holds open (the JWKS client)."""
        if self._jwks is not None:
            await self._jwks.aclose()

    def acting_user(self, principal: Principal, claimed: str | None) -> str:
        """The user a request acts for: always the principal, except that with auth disabled a
        request may name its user; naming someone else with auth on is 403 ``USER_MISMATCH``."""
        if claimed is None:
            return principal.user_id
        if self._config.enabled and claimed != principal.user_id:
            raise Forbidden("user_id comes from your credentials.", code=ProblemCode.USER_MISMATCH)
        return claimed

    def _authenticated(self, authorization: str | None) -> Principal:
        if not authorization:
            raise Unauthorized("Missing bearer token.", code=ProblemCode.UNAUTHORIZED)
        scheme, _, credential = authorization.partition(" ")
        credential = credential.strip()
        if scheme.lower() != "bearer" or not credential:
            raise Unauthorized(
                "Authorization must be 'Bearer <token>'.", code=ProblemCode.UNAUTHORIZED
            )
        user_id = self._lookup_token(credential)
        if user_id is not None:
            return Principal(user_id, "token", self._settings_roles(user_id))
        if (self._algorithms or self._jwks is not None) and credential.count(".") == 2:
            claims = self._decode_jwt(credential)
            subject = claims["sub"]
            claimed = _claimed_roles(claims.get(self._config.roles_claim), self._known_roles)
            roles = self._settings_roles(subject) | claimed
            return Principal(subject, "jwt", roles)
        raise Unauthorized("Invalid bearer token.", code=ProblemCode.INVALID_TOKEN)

    def roles_of(self, user_id: str) -> frozenset[str]:
        """The roles settings give ``user_id`` (a JWT's roles claim may add others to a caller)."""
        return self._settings_roles(user_id)

    def _settings_roles(self, user_id: str) -> frozenset[str]:
        roles = set(self._declared_roles_of.get(user_id, ()))
        if user_id in self._config.operators:
            roles.add(OPERATOR)
        if user_id in self._config.services:
            roles.add(SERVICE)
        return frozenset(roles)

    @staticmethod
    def _checked_acting_user(value: str) -> str:
        value = value.strip()
        if not _PERCENT_ENCODED.fullmatch(value):
            # Raw bytes past ASCII (read as latin-1) or a `%` that escapes nothing would give
            # one user two spellings: only what acting_user_header_value writes is taken.
            raise Forbidden(
                f"{ACTING_USER_HEADER} must be the user id as percent-encoded UTF-8.",
                code=ProblemCode.ACTING_USER_FORBIDDEN,
            )
        try:
            user = unquote(value, errors="strict")
        except UnicodeDecodeError:
            user = "\ufffd\x00"  # not UTF-8: refused below like any other unusable id
        problem = user_id_problem(user)
        if problem is not None:
            raise Forbidden(
                f"{ACTING_USER_HEADER} {problem}.", code=ProblemCode.ACTING_USER_FORBIDDEN
            )
        return user

    def _lookup_token(self, credential: str) -> str | None:
        # Compare against every entry in constant time so timing does not reveal a prefix match.
        found: str | None = None
        for token, user_id in self._config.tokens.items():
            if hmac.compare_digest(token.encode(), credential.encode()):
                found = user_id
        return found

    def _decode_jwt(self, credential: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(credential)
            algorithm = header.get("alg")
            key = self._verification_key(algorithm, header.get("kid"))
            claims: dict[str, Any] = jwt.decode(
                credential,
                key,
                algorithms=[str(algorithm)],
                audience=self._config.audience,
                issuer=self._config.issuer,
                options={
                    "require": ["sub", "exp"],
                    "verify_aud": self._config.audience is not None,
                },
            )
        except jwt.ExpiredSignatureError as exc:
            raise Unauthorized("Token expired.", code=ProblemCode.TOKEN_EXPIRED) from exc
        except jwt.PyJWTError as exc:
            raise Unauthorized("Invalid bearer token.", code=ProblemCode.INVALID_TOKEN) from exc
        self._check_claims(claims)
        return claims

    def _verification_key(self, algorithm: Any, kid: Any) -> Any:
        """The key a token with this header must verify with. A token may use only the one
        algorithm its key is bound to: no ``none``, no HS256 with a published public key."""
        if algorithm == "HS256" and "HS256" in self._algorithms:
            return self._config.jwt_secret
        if self._jwks is not None and algorithm != "HS256":
            if kid is not None and not isinstance(kid, str):
                raise Unauthorized("Token key id must be text.", code=ProblemCode.INVALID_TOKEN)
            try:
                published = self._jwks.key_for(kid)
            except JwksUnavailable as exc:
                raise Unavailable(
                    "The token issuer's signing keys cannot be fetched; try again later.",
                    code=ProblemCode.AUTH_KEYS_UNAVAILABLE,
                ) from exc
            if published is not None:
                if published.algorithm_name != algorithm:
                    raise Unauthorized(
                        "Token algorithm not accepted.", code=ProblemCode.INVALID_TOKEN
                    )
                return published.key
            if "RS256" not in self._algorithms:
                raise Unauthorized(
                    "Token signed with a key the issuer does not publish.",
                    code=ProblemCode.INVALID_TOKEN,
                )
        if algorithm == "RS256" and "RS256" in self._algorithms:
            return self._config.jwt_public_key
        raise Unauthorized("Token algorithm not accepted.", code=ProblemCode.INVALID_TOKEN)

    def _check_claims(self, claims: dict[str, Any]) -> None:
        """What PyJWT lets through: times as numeric strings (it calls ``int()`` on them), far
        future expiry, and claim text no store or response can carry."""
        if find_unsafe(claims) is not None:
            raise Unauthorized("Token claims hold unusable values.", code=ProblemCode.INVALID_TOKEN)
        for name in _TIME_CLAIMS:
            value = claims.get(name)
            if name in claims and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise Unauthorized(
                    f"Token claim {name!r} must be a number.", code=ProblemCode.INVALID_TOKEN
                )
        limit = self._config.max_token_lifetime_seconds
        expires = float(claims["exp"])
        issued = float(claims.get("iat", time.time()))
        if expires - time.time() > limit or expires - issued > limit:
            raise Unauthorized(
                f"Token lifetime exceeds the {limit:g} s this deployment accepts.",
                code=ProblemCode.INVALID_TOKEN,
            )
        subject = claims.get("sub")
        if not isinstance(subject, str) or user_id_problem(subject) is not None:
            raise Unauthorized(
                "Token subject is not a usable user id.", code=ProblemCode.INVALID_TOKEN
            )


def _unverified_key_id(authorization: str | None) -> tuple[bool, str | None]:
    """Whether the header holds a bearer JWT, and the ``kid`` its header names (unverified: it
    only says which key to fetch; the signature is checked with that key afterwards)."""
    scheme, _, credential = (authorization or "").partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or credential.count(".") != 2:
        return False, None
    try:
        kid = jwt.get_unverified_header(credential).get("kid")
    except jwt.PyJWTError:
        return False, None
    if kid is not None and not isinstance(kid, str):
        return False, None
    return True, kid


def _claimed_roles(value: Any, known: frozenset[str]) -> frozenset[str]:
    """The ``known`` roles named in a JWT claim: a list of names or one space-separated string
    (like ``scope``). Other names are ignored (an identity provider's claim may carry roles of
    other applications); any other shape makes the token invalid. The claim's length is bounded
    by the request's headers (``CONCLAVE_MAX_HEADER_BYTES``), and what is kept by ``known``."""
    if value is None:
        return frozenset()
    if isinstance(value, str):
        # Split at the space alone, as OAuth splits `scope`: str.split() also splits at a
        # no-break or ideographic space, and made another application's "Ops\u00a0operator"
        # an operator (outside attack).
        names = [name for name in value.split(" ") if name]
    elif isinstance(value, list) and all(isinstance(name, str) for name in value):
        names = value
    else:
        raise Unauthorized(
            "Token roles claim must list role names.", code=ProblemCode.INVALID_TOKEN
        )
    return frozenset(name for name in names if name in known)
