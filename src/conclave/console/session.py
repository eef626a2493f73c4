"""The signed-in user, kept in the browser: a sealed cookie, so the console holds no state.

The cookie carries the bearer token the user signed in with, their identity as the services
reported it (``GET /whoami``) and a CSRF token; it is encrypted and authenticated with Fernet
(AES-CBC + HMAC-SHA256, from ``cryptography``), so a browser can neither read the token out of it
(it is ``HttpOnly`` too) nor forge or alter a session. Fernet's timestamp bounds its age.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken

COOKIE_NAME = "conclave_console"
CSRF_FIELD = "csrf_token"
MAX_REVOKED = 100_000
"""Most signed-out sessions remembered at once (a few MB): past it, the oldest expire first."""
MAX_CREDENTIAL_CHARS = 2048
"""Longest bearer token or JWT accepted at sign-in: the sealed cookie must stay under the 4 KB
browsers keep per cookie (Fernet and base64 grow it by about 40 %)."""


_ROLES_KEPT = frozenset({"operator", "service"})
"""The roles a session keeps in its cookie: the ones the console acts on."""


@dataclass(frozen=True)
class Session:
    """Who is signed in, as the gateway's ``/whoami`` answered at sign-in."""

    credential: str
    user_id: str
    roles: tuple[str, ...]
    method: str
    csrf: str

    @property
    def is_operator(self) -> bool:
        """Whether the services show this user every user's resources."""
        return "operator" in self.roles

    def authorization(self) -> dict[str, str]:
        """The header the services authenticate this user by (none when auth is off)."""
        return {"Authorization": f"Bearer {self.credential}"} if self.credential else {}

    def csrf_matches(self, submitted: str | None) -> bool:
        """Whether a form's CSRF token is this session's (compared in constant time)."""
        return submitted is not None and hmac.compare_digest(
            submitted.encode("utf-8", "surrogateescape"), self.csrf.encode()
        )


class SessionSealer:
    """Seals sessions into cookie values and opens them again."""

    def __init__(self, secret: str, max_age_seconds: float) -> None:
        # Any long secret becomes a Fernet key: SHA-256 gives 32 bytes, Fernet's key size.
        key = base64.urlsafe_b64encode(hashlib.sha256(secret.encode()).digest())
        self._fernet = Fernet(key)
        self._max_age = max(1, int(max_age_seconds))
        # Sessions signed out in this process, by their CSRF token, until they would expire.
        self._revoked: dict[str, float] = {}

    @classmethod
    def with_random_key(cls, max_age_seconds: float) -> SessionSealer:
        """A sealer whose sessions end with this process (no key configured)."""
        return cls(secrets.token_urlsafe(32), max_age_seconds)

    @property
    def max_age_seconds(self) -> int:
        """How long a sealed session stays valid; also the cookie's ``Max-Age``."""
        return self._max_age

    def new_session(
        self, credential: str, user_id: str, roles: tuple[str, ...], method: str
    ) -> Session:
        """A fresh session with its own CSRF token."""
        return Session(credential, user_id, roles, method, secrets.token_urlsafe(24))

    def seal(self, session: Session) -> str:
        """The cookie value of ``session``."""
        document = {
            "c": session.credential,
            "u": session.user_id,
            # The console acts on the built-in roles alone; a user's declared roles (up to 100,
            # CONCLAVE_ROLES) would push the cookie past what browsers keep (outside attack).
            "r": [role for role in session.roles if role in _ROLES_KEPT],
            "m": session.method,
            "x": session.csrf,
        }
        return self._fernet.encrypt_at_time(
            json.dumps(document, separators=(",", ":")).encode(), int(time.time())
        ).decode("ascii")

    def open(self, cookie: str | None) -> Session | None:
        """The session a cookie holds, or ``None`` when it is absent, forged, altered, from
        another key or older than the session lifetime."""
        if not cookie or len(cookie) > 8192:
            return None
        try:
            plain = self._fernet.decrypt(cookie.encode("ascii"), ttl=self._max_age)
            document = json.loads(plain)
            if str(document["x"]) in self._revoked:
                return None
            return Session(
                credential=str(document["c"]),
                user_id=str(document["u"]),
                roles=tuple(str(role) for role in document["r"]),
                method=str(document["m"]),
                csrf=str(document["x"]),
            )
        except (InvalidToken, UnicodeEncodeError, ValueError, KeyError, TypeError):
            return None

    def revoke(self, cookie: str) -> None:
        """End the session a cookie holds, here, even if a copy of the cookie is kept (signing
        out). Kept in this process until the session would have expired anyway: with several
        console replicas, a copy still works on the others until then (docs/console.md)."""
        session = self.open(cookie)
        if session is None:
            return
        now = time.monotonic()
        self._revoked = {csrf: until for csrf, until in self._revoked.items() if until > now}
        if len(self._revoked) < MAX_REVOKED:
            self._revoked[session.csrf] = now + self._max_age
