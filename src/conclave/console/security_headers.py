"""Headers every console answer carries: what the browser may load, frame and send on.

The content security policy admits only the console's own scripts and styles (no inline script,
no other origin): a value shown on a page that slipped past escaping still could not run. Pages
cannot be framed (clickjacking), and no page's address leaks to another site as a referrer.

The referrer policy is ``same-origin``, not ``no-referrer``: under ``no-referrer`` Chromium sends
``Origin: null`` with the console's own form posts, which the request guard every Conclave app
runs (:mod:`conclave.platform.request_origin`) refuses as a foreign page (403
``ORIGIN_NOT_ALLOWED``), so no form of the console could be sent from a real browser.
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
_HSTS = (b"strict-transport-security", b"max-age=31536000")


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
        # Over HTTPS (directly, or as a trusted proxy says), browsers are told to keep to it.
        https = scope.get("scheme") == "https"

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [header for header in HEADERS if header[0] not in present]
                if https and _HSTS[0] not in present:
                    headers.append(_HSTS)
                # A static file may be cached; nothing else may (a missing file's page names
                # the signed-in user and carries their CSRF token).
                cacheable = is_static and message.get("status") in (200, 304)
                if not cacheable and _NO_STORE[0] not in present:
                    headers.append(_NO_STORE)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
