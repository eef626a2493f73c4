"""Headers every console answer carries: what the browser may load, frame and send on.

The content security policy admits only the console's own scripts and styles (no inline script,
no other origin): a value shown on a page that slipped past escaping still could not run. Pages
cannot be framed (clickjacking), and no page's address leaks to another site as a referrer.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    # Not ``no-referrer``: under it Chromium sends ``Origin: null`` with the console's own form
    # posts, which the platform's origin check refuses (sign-in and sign-out failed in a real
    # browser). ``same-origin`` still sends no page address to another site.
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
_NO_STORE = (b"cache-control", b"no-store")


class SecurityHeadersMiddleware:
    """Adds :data:`HEADERS` to every answer, and ``Cache-Control: no-store`` to every page (a
    signed-in page must not be kept by a shared cache or shown again after signing out)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        is_static = str(scope.get("path", "")).startswith("/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [header for header in HEADERS if header[0] not in present]
                if not is_static and _NO_STORE[0] not in present:
                    headers.append(_NO_STORE)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
