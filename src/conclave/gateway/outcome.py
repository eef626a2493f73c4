"""A call's outcome as the caller sees it, and the words of its statuses."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from conclave.platform.errors import ConclaveError
from conclave.platform.problem_types import ProblemCode

BLESSED, PURIFIED, HERETICAL = "blessed", "purified", "heretical"
SUCCEEDED, REJECTED, FAILED, TIMEOUT, RUNNING = (
    "succeeded",
    "rejected",
    "failed",
    "timeout",
    "running",
)


@dataclass(slots=True)
class Outcome:
    """A finished call as the caller sees it (also rebuilt from the audit row on replay).

    Not frozen: a frozen dataclass sets each of its fields through ``object.__setattr__``, and
    one is made for every governed call; only the chain that made it sets its leaf hash once the
    call's audit row committed (:meth:`GatewayService._logged`)."""

    conclave_id: str
    tool: str
    status: str
    orthodoxy_status: str
    result: Any
    warnings: list[str]
    duration_ms: float
    http_status: int = 200
    error_code: str | None = None
    error_message: str | None = None
    errors: list[dict[str, str]] | None = None
    replayed: bool = False
    upstream_credential: str | None = None
    """The kind of credential an upstream tool's call presented (``user``, ``service``,
    ``none``); None for the gateway's own tools."""
    log_leaf_hash: bytes | None = None
    """The leaf hash of the call's entry in the transparency log ``calls``, when it is kept."""

    def raise_if_failed(self) -> None:
        """Turn a failed outcome into the problem the caller receives."""
        if self.http_status >= 400:
            raise self.problem()

    def problem(self) -> ConclaveError:
        """The problem a failed outcome is answered with."""
        code = self.error_code or ProblemCode.TOOL_FAILED
        error = ConclaveError(
            self.error_message,
            code=code,
            errors=self.errors,
            extra={
                "conclave_id": self.conclave_id,
                "tool": self.tool,
                "orthodoxy_status": self.orthodoxy_status,
            },
            headers={"Idempotent-Replayed": "true"} if self.replayed else None,
        )
        error.status = self.http_status
        return error


def request_hash(tool: str, args: Any, on_behalf_of: str | None = None) -> str:
    """Fingerprint of a request, to refuse an idempotency key reused for different input. A
    service acting for the user is part of it (only then: a user's own call hashes as it always
    did), so the user's key does not replay a call the service made for them, nor the other way
    round: either is answered 409 ``IDEMPOTENCY_KEY_REUSED``, not as the other's call."""
    request: dict[str, Any] = {"tool": tool, "args": args}
    if on_behalf_of is not None:
        request["on_behalf_of"] = on_behalf_of
    canonical = json.dumps(request, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()
