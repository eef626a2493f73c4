"""Sign in with a bearer token or JWT, and sign out.

The credential is checked by asking the gateway who it belongs to (``GET /whoami``): the console
has no user table of its own, so the services' principals are the console's. The sign-in form is
protected against login CSRF (another site signing the browser in as someone else) by a
double-submit token: a random value in a short-lived ``SameSite=Strict`` cookie that the form must
repeat.
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from conclave.console.session import COOKIE_NAME, CSRF_FIELD, MAX_CREDENTIAL_CHARS
from conclave.console.upstream import Answer, ServiceProblem, problem_of
from conclave.console.web import (
    SignedIn,
    checked_form,
    page,
    safe_next,
    sealer_of,
    services_of,
    url_encoded_form,
)
from conclave.platform.problem_types import ProblemCode, title_of

router = APIRouter(include_in_schema=False)

SIGN_IN_COOKIE = "conclave_console_signin"
_SIGN_IN_FORM_SECONDS = 3600
MAX_COOKIE_CHARS = 4000
"""Longest session cookie value set: browsers keep 4,096 bytes of name, value and attributes."""


@router.get("/signin")
async def sign_in_form(
    request: Request, next_path: Annotated[str | None, Query(alias="next")] = None
) -> Response:
    """The sign-in form (or, already signed in, where the user was going)."""
    if sealer_of(request).open(request.cookies.get(COOKIE_NAME)) is not None:
        return RedirectResponse(safe_next(next_path), status_code=303)
    return await _form(request, safe_next(next_path))


@router.post("/signin")
async def sign_in(request: Request) -> Response:
    """Check the credential with the gateway and start a session."""
    values = await url_encoded_form(request)
    target = safe_next(values.get("next"))
    expected = request.cookies.get(SIGN_IN_COOKIE)
    submitted = values.get(CSRF_FIELD)
    if not expected or not submitted or not _same(expected, submitted):
        return await _form(request, target, error=_STALE_FORM, status_code=403)
    credential = values.get("token", "").strip()
    problem = _credential_problem(credential)
    if problem is not None:
        return await _form(request, target, error=problem, status_code=422)
    sealer = sealer_of(request)
    candidate = sealer.new_session(credential, "", (), "")
    try:
        answer = await services_of(request).request("GET", "gateway", "/whoami", None,
                                                    headers=candidate.authorization())  # fmt: skip
    except ServiceProblem as exc:
        return await _form(request, target, error=_shown(exc), status_code=exc.status)
    if not answer.is_success:
        refused = problem_of("gateway", answer)
        return await _form(request, target, error=_shown(refused), status_code=refused.status)
    identity = _identity_of(answer)
    if identity is None:
        unusable = ServiceProblem(
            "gateway", 502, title_of(ProblemCode.UPSTREAM_ANSWER_INVALID),
            "The gateway's /whoami answer names no user: is CONSOLE_GATEWAY_URL the gateway?",
            ProblemCode.UPSTREAM_ANSWER_INVALID,
        )  # fmt: skip
        return await _form(request, target, error=_shown(unusable), status_code=502)
    session = sealer.new_session(credential, *identity)
    sealed = sealer.seal(session)
    if len(sealed) > MAX_COOKIE_CHARS:
        # A browser drops a larger cookie without a word, and the user would be sent back here
        # for ever.
        too_long = {
            "title": "Identity too long to keep",
            "detail": "This credential and user id do not fit in a browser cookie; use a "
            "shorter token or a user id of fewer characters.",
            "code": ProblemCode.VALIDATION_FAILED,
        }
        return await _form(request, target, error=too_long, status_code=422)
    response = RedirectResponse(target, status_code=303)
    _set_session_cookie(request, response, sealed, sealer.max_age_seconds)
    response.delete_cookie(SIGN_IN_COOKIE, path="/signin")
    return response


@router.post("/signout")
async def sign_out(request: Request, session: SignedIn) -> Response:
    """End the session (the form carries the CSRF token: no other site can sign you out)."""
    await checked_form(request, session)
    sealer_of(request).revoke(request.cookies.get(COOKIE_NAME, ""))
    response = RedirectResponse("/signin", status_code=303)
    response.delete_cookie(COOKIE_NAME, path="/")
    return response


_STALE_FORM = {
    "title": "Form not accepted",
    "detail": "The sign-in form expired or came from another page; sign in again.",
    "code": ProblemCode.CSRF_FAILED,
}


def _same(expected: str, submitted: str) -> bool:
    """Constant-time comparison of any two texts (``compare_digest`` takes only ASCII ``str``)."""
    return secrets.compare_digest(
        expected.encode("utf-8", "surrogatepass"), submitted.encode("utf-8", "surrogatepass")
    )


def _credential_problem(credential: str) -> dict[str, str] | None:
    """Why a typed credential cannot be sent as a bearer token, or ``None``."""
    if len(credential) > MAX_CREDENTIAL_CHARS:
        detail = f"A token is at most {MAX_CREDENTIAL_CHARS} characters."
    elif not all(0x21 <= ord(char) <= 0x7E for char in credential):
        detail = "A token is printable ASCII without spaces."
    else:
        return None
    return {"title": "Token not usable", "detail": detail, "code": ProblemCode.VALIDATION_FAILED}


def _identity_of(answer: Answer) -> tuple[str, tuple[str, ...], str] | None:
    """User id, roles and method from a ``/whoami`` answer, or ``None`` when it is not one."""
    try:
        body = answer.json()
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    user_id, roles, method = body.get("user_id"), body.get("roles", []), body.get("method", "")
    if not isinstance(user_id, str) or not user_id or not isinstance(roles, list):
        return None
    return user_id, tuple(str(role) for role in roles), str(method)


def _shown(problem: ServiceProblem) -> dict[str, str]:
    return {"title": problem.title, "detail": problem.detail, "code": problem.code}


async def _form(
    request: Request, target: str, error: dict[str, str] | None = None, status_code: int = 200
) -> Response:
    token = secrets.token_urlsafe(24)
    auth_off = await _authentication_is_off(request)
    response = page(
        request,
        "signin.html",
        None,
        status_code=status_code,
        sign_in_token=token,
        next_path=target,
        error=error,
        auth_off=auth_off,
    )
    response.set_cookie(
        SIGN_IN_COOKIE,
        token,
        max_age=_SIGN_IN_FORM_SECONDS,
        path="/signin",
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    return response


async def _authentication_is_off(request: Request) -> bool:
    """Whether the gateway accepts a caller without credentials (``conclave up``)."""
    try:
        answer = await services_of(request).request("GET", "gateway", "/whoami", None)
    except ServiceProblem:
        return False
    return answer.is_success


def _set_session_cookie(request: Request, response: Response, value: str, max_age: int) -> None:
    response.set_cookie(
        COOKIE_NAME,
        value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )


def _secure(request: Request) -> bool:
    mode = request.app.state.settings.secure_cookie
    return mode == "always" or (mode == "auto" and request.url.scheme == "https")
