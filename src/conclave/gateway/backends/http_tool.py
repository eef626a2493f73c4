"""Executors for tools backed by an HTTP endpoint: time-out, retries with backoff for idempotent
tools, one circuit breaker per backend, errors mapped to stable codes (never a stack trace)."""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from conclave.gateway.backends.breaker import CircuitBreaker
from conclave.gateway.tools import Executor, ToolContext, ToolExecutionError
from conclave.platform.auth import ACTING_USER_HEADER, acting_user_header_value
from conclave.platform.problem_types import ProblemCode
from conclave.platform.urls import path_segment

Fallback = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class HttpCall:
    """How one tool calls its backend."""

    backend: str
    base_url: str | None
    method: str
    path: str
    timeout_seconds: float
    retries: int
    arguments: dict[str, str] | None
    result_field: str | None
    token: str | None = None
    # A Conclave service: it is told which user the gateway acts for, so it records and
    # authorizes that user rather than the gateway's own service identity.
    sends_acting_user: bool = False


def _unavailable(message: str) -> ToolExecutionError:
    return ToolExecutionError(message, code=ProblemCode.BACKEND_UNAVAILABLE, status=503)


def _backend_error(call: HttpCall, what: str, *, code: str, status: int) -> ToolExecutionError:
    """``Backend '<name>' <what>``: what the backend did, as the call's error."""
    return ToolExecutionError(f"Backend {call.backend!r} {what}", code=code, status=status)


def _request_body(call: HttpCall, args: dict[str, Any], used: set[str]) -> dict[str, Any]:
    if call.arguments is None:
        return {name: value for name, value in args.items() if name not in used}
    return {field: args[name] for field, name in call.arguments.items() if name in args}


def _path(call: HttpCall, args: dict[str, Any]) -> tuple[str, set[str]]:
    """Fill ``{name}`` placeholders of the path from the arguments, each one exactly one path
    segment: an argument such as ``..``, ``a/b`` or ``x?y`` cannot reach another endpoint of the
    backend (which the gateway may call with its service token)."""
    used = {name for name in _PLACEHOLDER.findall(call.path) if name in args}

    def segment(match: re.Match[str]) -> str:
        name = match.group(1)
        try:
            return path_segment(args.get(name, ""))
        except ValueError as exc:
            message = f"Argument {name!r} must be a non-empty text to fill the backend path."
            raise ToolExecutionError(
                message, code=ProblemCode.INVALID_ARGUMENT, status=422
            ) from exc

    return _PLACEHOLDER.sub(segment, call.path), used


def http_executor(
    call: HttpCall,
    client: httpx.AsyncClient,
    breaker: CircuitBreaker,
    *,
    fallback: Fallback | None = None,
    backoff_seconds: float = 0.2,
) -> Executor:
    """An executor that sends the (mapped) arguments to the backend and returns its JSON answer."""

    async def execute(args: dict[str, Any], ctx: ToolContext) -> Any:
        if call.base_url is None:
            if fallback is not None:
                return await fallback(args, ctx)
            raise _unavailable(f"Backend {call.backend!r} is not configured.")
        path, used = _path(call, args)
        url = call.base_url.rstrip("/") + "/" + path.lstrip("/")
        body = _request_body(call, args, used)
        headers = {"X-Conclave-Id": ctx.conclave_id, "X-Correlation-ID": ctx.correlation_id or ""}
        if call.token:
            headers["Authorization"] = f"Bearer {call.token}"
        if call.sends_acting_user:
            headers[ACTING_USER_HEADER] = acting_user_header_value(ctx.user_id)
        attempts = call.retries + 1
        for attempt in range(attempts):
            if not breaker.allow():
                raise _unavailable(f"Backend {call.backend!r} is failing; calls are paused.")
            last = attempt == attempts - 1
            try:
                response = await client.request(
                    call.method,
                    url,
                    json=body if call.method != "GET" else None,
                    params=_query(body) if call.method == "GET" else None,
                    headers=headers,
                    timeout=call.timeout_seconds,
                )
            except httpx.TimeoutException as exc:
                breaker.record_failure()
                if last:
                    message = f"did not answer in {call.timeout_seconds:g} s."
                    raise _backend_error(
                        call, message, code=ProblemCode.BACKEND_TIMEOUT, status=504
                    ) from exc
            except httpx.TransportError as exc:
                breaker.record_failure()
                if last:
                    raise _unavailable(f"Backend {call.backend!r} is not reachable.") from exc
            else:
                if response.status_code < 500:
                    breaker.record_success()  # the backend is alive, whatever it thinks of us
                    return _result(call, response)
                breaker.record_failure()
                if last:
                    message = f"failed with HTTP {response.status_code}."
                    raise _backend_error(call, message, code=ProblemCode.BACKEND_FAILED, status=502)
            await asyncio.sleep(backoff_seconds * 2**attempt * random.uniform(0.5, 1.0))
        raise AssertionError("unreachable: the last attempt returns or raises")

    return execute


def _query(body: dict[str, Any]) -> dict[str, str]:
    return {k: ",".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in body.items()}


def _result(call: HttpCall, response: httpx.Response) -> Any:
    if response.status_code >= 400:
        detail = response.text[:300].strip() or response.reason_phrase
        message = f"refused the call (HTTP {response.status_code}): {detail}"
        raise _backend_error(call, message, code=ProblemCode.BACKEND_REJECTED, status=422)
    if not response.content:
        return None
    try:
        answer = response.json()
    except ValueError as exc:
        message = "answered with something that is not JSON."
        raise _backend_error(call, message, code=ProblemCode.BACKEND_FAILED, status=502) from exc
    if call.result_field is not None:
        if not isinstance(answer, dict) or call.result_field not in answer:
            message = f"answer has no {call.result_field!r} field."
            raise _backend_error(call, message, code=ProblemCode.BACKEND_FAILED, status=502)
        return answer[call.result_field]
    return answer
