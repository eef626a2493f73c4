"""The governance chain: resolve → validate → execute → check → audit + event → metrics.

Every call, whatever its outcome, leaves exactly one audit row in ``mcp_tool_calls`` and exactly
one outbox event on ``conclave.mcp.actions``, written in the same transaction. A call that reaches
the executor of a tool with side effects is recorded as ``running`` *before* it runs, so no side
effect ever happens without an audit trail: if that first write fails the call is refused with 503
``STORE_UNAVAILABLE``. Tools annotated ``readOnlyHint`` are recorded once, when they finish.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

import anyio
from sqlalchemy.exc import IntegrityError

from conclave.gateway import store
from conclave.gateway.alias_args import Rejection, rewrite_alias_args
from conclave.gateway.call_log import call_entry
from conclave.gateway.endings import Ending, failed, judge_result
from conclave.gateway.events import call_event
from conclave.gateway.idempotency import conflicting_key, recorded_already, replay
from conclave.gateway.limits import CallLimits
from conclave.gateway.metrics import GatewayMetrics
from conclave.gateway.outcome import (
    HERETICAL,
    REJECTED,
    TIMEOUT,
    Outcome,
    request_hash,
)
from conclave.gateway.policy import ToolPolicy, police_call
from conclave.gateway.progress import ProgressReporter
from conclave.gateway.records import AuditRow
from conclave.gateway.registry import RegisteredAlias, RegisteredTool, ToolRegistry
from conclave.gateway.tools import Tool, ToolContext, ToolExecutionError
from conclave.gateway.validation import depth_exceeds, redact, schema_errors
from conclave.gateway.workers import WorkerPool
from conclave.platform.clock import utc_now
from conclave.platform.db.batch import Build, Insert, Write
from conclave.platform.errors import (
    ConclaveError,
    NotFound,
    StoreUnavailable,
    Unprocessable,
)
from conclave.platform.ids import new_id
from conclave.platform.inputs import UnsafeInput, escape_text
from conclave.platform.outbox import outbox_write
from conclave.platform.problem_types import ProblemCode
from conclave.platform.runtime import Platform
from conclave.platform.shielding import shielded
from conclave.platform.tlog.log import TransparencyLog

log = logging.getLogger(__name__)

_FINISH_ATTEMPTS = 4


@dataclass(frozen=True)
class ExecuteCommand:
    """A validated request to execute a tool on behalf of ``user_id``, who has ``roles``."""

    tool: str
    args: Any
    user_id: str
    correlation_id: str | None
    idempotency_key: str | None = None
    roles: frozenset[str] = frozenset()
    on_behalf_of: str | None = None
    """The service that authenticated and acts for ``user_id`` (recorded in the audit row)."""
    progress: ProgressReporter | None = None  # ToolContext.progress: the caller can receive it


@dataclass(slots=True)
class _Call:
    """A call on its way through the chain. ``prerecorded``: its row was written ``running``
    before the tool ran, so its outcome completes that row. ``tool``: the tool it resolved to
    (``None``: an unknown name, or one the policy hides from the caller)."""

    command: ExecuteCommand
    row: AuditRow
    started: float
    prerecorded: bool = False
    tool: Tool | None = None


class GatewayService:
    """Runs tool calls through the governance chain."""

    def __init__(
        self,
        registry: ToolRegistry,
        platform: Platform,
        metrics: GatewayMetrics,
        limits: CallLimits,
        workers: WorkerPool,
        *,
        default_timeout: float,
        max_depth: int,
        max_result_bytes: int,
        call_log: TransparencyLog | None = None,
        policy: ToolPolicy | None = None,
    ) -> None:
        self.registry = registry
        self.policy = policy or ToolPolicy()
        self._call_log = call_log
        self._platform = platform
        self._metrics = metrics
        self._limits = limits
        self._workers = workers
        self._default_timeout = default_timeout
        self._max_depth = max_depth
        self._max_result_bytes = max_result_bytes

    async def execute(self, command: ExecuteCommand) -> Outcome:
        """Run one call. Returns the outcome; failed outcomes carry their HTTP status."""
        started = time.perf_counter()
        await self._limits.admit_user(command.user_id)
        conclave_id = new_id()
        alias = self.registry.alias(command.tool)
        registered = self.registry.resolve(alias.alias.canonical if alias else command.tool)
        refusal = police_call(self.policy, command.user_id, command.roles, alias, registered)
        if refusal is not None:
            # Policed before any replay: a key must not answer what the caller may not call now
            # (roles differ between a user's own token and a service acting for them). The
            # refusal is a call of its own, audited without the key the earlier call holds.
            command = replace(command, idempotency_key=None)
        fingerprint = (
            request_hash(command.tool, command.args, command.on_behalf_of)
            if command.idempotency_key
            else None
        )
        if command.idempotency_key:
            earlier = await replay(
                self._platform.engine, command.user_id, command.idempotency_key, fingerprint
            )
            if earlier is not None:
                return earlier
        if refusal is not None and refusal.hidden:
            alias = registered = None
        forbidden = refusal.rejection() if refusal is not None and not refusal.hidden else None
        if registered is not None and forbidden is None:
            await self._limits.admit_tool(registered.tool)
        shape = self._shape(command.args)
        row = self._audit_row(command, conclave_id, alias, registered, shape, fingerprint)
        rejection = forbidden or self._reject(command, registered, alias, shape=shape)
        if rejection is None and alias is not None and registered is not None:
            canonical_args, rejection = rewrite_alias_args(alias, registered, command.args)
            if canonical_args is not None:
                row.canonical_args = redact(canonical_args, registered.tool.parameters)
                command = replace(command, args=canonical_args)
        if rejection is not None:
            resolved = registered.tool if registered else None
            return await self._record_rejection(
                _Call(command, row, started, tool=resolved), rejection
            )

        assert registered is not None
        async with self._limits.slot(registered.tool):
            prerecorded = not _read_only(registered)
            call = _Call(command, row, started, prerecorded, registered.tool)
            if call.prerecorded:
                # Its own task: the writer commits the queued row whatever happens to its
                # waiter, so a cancellation must wait for that commit before finishing the row
                # (committers run in parallel: a finish queued at once could land first).
                running = asyncio.ensure_future(
                    self._platform.writer.write(store.record_running_call(row))
                )
                try:
                    await asyncio.shield(running)
                except IntegrityError:
                    return await conflicting_key(
                        self._platform.engine, command.user_id, command.idempotency_key, fingerprint
                    )
                except asyncio.CancelledError:
                    await self._cancelled_before_running(call, running)
                    raise
            return await self._run(call, registered)

    async def refuse_unsafe(self, command: ExecuteCommand, refusal: UnsafeInput) -> Outcome:
        """Audit and answer a call refused for holding a value no store, bus or answer can carry
        (``refusal``): ``heretical``, 422 ``UNSAFE_INPUT``. ``command`` holds the call with those
        values escaped (:func:`conclave.platform.inputs.escape_unsafe`); nothing runs."""
        started = time.perf_counter()
        await self._limits.admit_user(command.user_id)
        alias = self.registry.alias(command.tool)
        registered = self.registry.resolve(alias.alias.canonical if alias else command.tool)
        hidden = police_call(self.policy, command.user_id, command.roles, alias, registered)
        if hidden is not None and hidden.hidden:  # its row must not name the tool either
            alias = registered = None
        shape = self._shape(command.args)
        row = self._audit_row(command, new_id(), alias, registered, shape, None)
        rejection = (refusal.code, refusal.detail, refusal.errors, refusal.status)
        call = _Call(command, row, started, tool=registered.tool if registered else None)
        return await self._record_rejection(call, rejection)

    def _audit_row(
        self,
        command: ExecuteCommand,
        conclave_id: str,
        alias: RegisteredAlias | None,
        registered: RegisteredTool | None,
        shape: tuple[bool, bool],
        fingerprint: str | None,
    ) -> AuditRow:
        schema = (alias.view if alias else registered.tool).parameters if registered else None
        return AuditRow(
            conclave_id=conclave_id,
            tool_name=registered.tool.name if registered else command.tool[:128],
            requested_tool=command.tool,
            args=self._stored_args(command.args, schema, shape),
            user_id=command.user_id,
            correlation_id=command.correlation_id,
            idempotency_key=command.idempotency_key,
            request_hash=fingerprint,
            on_behalf_of=command.on_behalf_of,
            created_at=utc_now(),
        )

    def _shape(self, args: Any) -> tuple[bool, bool]:
        """(nests too deep, too large): measured once per call, used by the checks and the audit."""
        too_deep = depth_exceeds(args, self._max_depth)
        return too_deep, not too_deep and self._limits.args_too_large(args)

    def _stored_args(self, args: Any, schema: Any, shape: tuple[bool, bool]) -> Any:
        too_deep, too_large = shape
        if too_deep:
            return {"_omitted": f"arguments nest deeper than {self._max_depth} levels"}
        if too_large:
            return {"_omitted": f"arguments larger than {self._limits.max_args_bytes} bytes"}
        return redact(args, schema)

    def use_policy(self, policy: ToolPolicy) -> None:
        """Judge every later listing and call by ``policy`` (a reloaded catalogue's): calls
        already past their check keep the decision they had."""
        self.policy = policy

    def normalize(
        self, name: str, args: Any, user_id: str, roles: frozenset[str]
    ) -> tuple[str, dict[str, Any]]:
        """The canonical tool and rewritten arguments of alias call ``name`` by ``user_id`` with
        ``roles`` (nothing runs); an alias the policy hides from them is unknown, as in a call."""
        alias = self.registry.alias(name)
        registered = self.registry.resolve(alias.alias.canonical) if alias else None
        refusal = police_call(self.policy, user_id, roles, alias, registered)
        if alias is None or registered is None or (refusal is not None and refusal.hidden):
            raise NotFound(
                f"No alias tool is called {name[:128]!r}.", code=ProblemCode.UNKNOWN_ALIAS
            )
        command = ExecuteCommand(tool=name, args=args, user_id="", correlation_id=None)
        rejection = self._reject(command, registered, alias, check_available=False)
        canonical_args = None
        if rejection is None:
            canonical_args, rejection = rewrite_alias_args(alias, registered, args)
        if rejection is not None or canonical_args is None:
            code, message, errors, status = rejection or (
                ProblemCode.VALIDATION_FAILED,
                "",
                None,
                422,
            )
            error = Unprocessable(message, code=code, errors=errors)
            error.status = status
            raise error
        return registered.tool.name, canonical_args

    def _reject(
        self,
        command: ExecuteCommand,
        registered: RegisteredTool | None,
        alias: RegisteredAlias | None = None,
        *,
        check_available: bool = True,
        shape: tuple[bool, bool] | None = None,
    ) -> Rejection | None:
        if registered is None:
            return ProblemCode.UNKNOWN_TOOL, f"No tool is called {command.tool[:128]!r}.", None, 404
        if check_available and registered.tool.unavailable_reason is not None:
            reason = registered.tool.unavailable_reason
            detail = f"Tool {registered.tool.name!r} is unavailable: {reason}."
            return ProblemCode.BACKEND_UNAVAILABLE, detail, None, 503
        if not isinstance(command.args, dict):
            errors = [{"field": "/", "message": "arguments must be a JSON object", "rule": "type"}]
            return ProblemCode.VALIDATION_FAILED, "Arguments must be a JSON object.", errors, 422
        too_deep, too_large = shape or self._shape(command.args)
        if too_deep:
            errors = [{"field": "/", "message": "nesting too deep", "rule": "maxDepth"}]
            detail = f"Arguments nest deeper than {self._max_depth} levels."
            return ProblemCode.VALIDATION_FAILED, detail, errors, 422
        if too_large:
            detail = f"Arguments exceed {self._limits.max_args_bytes} bytes of JSON."
            return ProblemCode.ARGS_TOO_LARGE, detail, None, 413
        errors = schema_errors(alias.arguments if alias else registered.arguments, command.args)
        if errors:
            fields = ", ".join(sorted({e["field"] for e in errors}))
            return ProblemCode.VALIDATION_FAILED, f"Invalid arguments at {fields}.", errors, 422
        return None

    async def _run(self, call: _Call, registered: RegisteredTool) -> Outcome:
        tool = registered.tool
        command = call.command
        context = ToolContext(
            call.row.conclave_id,
            command.user_id,
            command.correlation_id,
            progress=command.progress,
        )
        timeout = tool.timeout_seconds or self._default_timeout
        try:
            # `asyncio.timeout`, not `wait_for`: on Python 3.11 `wait_for` runs the executor in a
            # task of its own, which costs more than most tools. It fires at an `await`, so work
            # that computes runs in a worker process, killed when it fires.
            async with asyncio.timeout(timeout) as deadline:
                if tool.executor is not None:
                    result = await tool.executor(dict(command.args), context)
                else:
                    assert tool.cpu_executor is not None
                    result = await self._workers.run(
                        tool.cpu_executor, dict(command.args), context, deadline
                    )
        except asyncio.CancelledError:
            message = "The caller cancelled the call; the tool may have done its work."
            await self._record_cancelled(call, message, context.upstream_credential)
            raise
        except TimeoutError:
            message = f"The tool did not finish within {timeout:g} s."
            ending = failed(504, ProblemCode.TOOL_TIMEOUT, message, status=TIMEOUT)
        except ToolExecutionError as exc:
            ending = failed(exc.status, exc.code, exc.message)
        except ConclaveError as exc:  # e.g. the store a tool reads is down
            ending = failed(exc.status, exc.code, exc.detail)
        except Exception:
            log.exception("tool executor raised", extra={"tool": tool.name})
            ending = failed(502, ProblemCode.TOOL_FAILED, "The tool failed unexpectedly.")
        else:
            ending = judge_result(registered, command.args, result, self._max_result_bytes)
        # The tool has finished: a cancellation landing now must not leave its row `running`
        # (nor interrupt the retries of a store blip). The row keeps what really happened.
        # (`shielded`: no scope is made for a task no anyio scope can cancel, as `/execute`'s.)
        with shielded():
            outcome = await self._finish(
                call, ending, upstream_credential=context.upstream_credential
            )
        return outcome

    async def _cancelled_before_running(self, call: _Call, running: asyncio.Future[None]) -> None:
        """Finish the ``running`` row of ``call``, cancelled while it was being written, once
        it is committed; nothing is recorded if it was not (the call was refused instead)."""
        with anyio.CancelScope(shield=True):
            try:
                await running
            except (IntegrityError, StoreUnavailable):
                return  # never written: nothing to finish
        await self._record_cancelled(call, "The caller cancelled the call; the tool did not run.")

    async def _record_cancelled(
        self, call: _Call, message: str, upstream_credential: str | None = None
    ) -> None:
        """Record ``call`` as ``CALL_CANCELLED`` (an MCP client gave up), shielded: recorded
        whatever cancels this task next."""
        ending = failed(409, ProblemCode.CALL_CANCELLED, message)
        with anyio.CancelScope(shield=True):
            await self._finish(call, ending, upstream_credential=upstream_credential)

    async def _finish(
        self, call: _Call, ending: Ending, *, upstream_credential: str | None = None
    ) -> Outcome:
        row = call.row
        message, warnings = ending.message, ending.warnings
        if message is not None:  # a plug-in's or a backend's words: stored and answered
            message = escape_text(message)
        if warnings:
            warnings = [escape_text(warning) for warning in warnings]
        outcome = Outcome(
            conclave_id=row.conclave_id,
            tool=row.tool_name,
            status=ending.status,
            orthodoxy_status=ending.orthodoxy,
            result=ending.result,
            warnings=warnings or [],
            duration_ms=_elapsed_ms(call.started),
            http_status=ending.http_status,
            error_code=ending.code,
            error_message=message,
            upstream_credential=upstream_credential,
        )
        row.finish(outcome)
        # The tool has run: keep trying for a moment so a store blip does not lose its audit row.
        written = self._finished_writes(row, prerecorded=call.prerecorded)
        for attempt in range(_FINISH_ATTEMPTS):
            try:
                await self._platform.writer.write_built(written)
                break
            except IntegrityError:
                if await recorded_already(self._platform.engine, row):
                    break  # an earlier try (ours or the writer's) committed: its answer was lost
                # A read-only call lost an idempotency race: answer with the winner's outcome.
                return await conflicting_key(
                    self._platform.engine, row.user_id, row.idempotency_key, row.request_hash
                )
            except StoreUnavailable:
                if attempt == _FINISH_ATTEMPTS - 1:
                    extra = {"conclave_id": row.conclave_id}
                    log.error("audit row of a finished call could not be completed", extra=extra)
                    raise
                await asyncio.sleep(0.1 * 2**attempt)
        seconds = outcome.duration_ms / 1000
        label = self._metrics.tool_label(self.policy, call.tool)
        self._metrics.observe(label, outcome.status, outcome.orthodoxy_status, seconds)
        return self._logged(row, outcome)

    async def _record_rejection(self, call: _Call, rejection: Rejection) -> Outcome:
        code, message, errors, http_status = rejection
        row = call.row
        outcome = Outcome(
            conclave_id=row.conclave_id,
            tool=row.tool_name,
            status=REJECTED,
            orthodoxy_status=HERETICAL,
            result=None,
            warnings=[],
            duration_ms=_elapsed_ms(call.started),
            http_status=http_status,
            error_code=code,
            error_message=message,
            errors=errors,
        )
        row.finish(outcome)
        if errors:
            row.warnings = [f"{e['field']}: {e['message']}" for e in errors]
        try:
            await self._platform.writer.write_built(self._finished_writes(row, prerecorded=False))
        except IntegrityError:
            if not await recorded_already(self._platform.engine, row):
                return await conflicting_key(
                    self._platform.engine, row.user_id, row.idempotency_key, row.request_hash
                )
        self._metrics.observe(
            self._metrics.tool_label(self.policy, call.tool), REJECTED, HERETICAL, 0.0
        )
        return self._logged(row, outcome)

    def _finished_writes(self, row: AuditRow, *, prerecorded: bool) -> Build:
        """The writes of a finished call (its audit row, its event, its leaf), made when the
        writer assembles the batch the call commits in: with the other calls' of that batch, in
        one loop, that costs a third of the CPU it costs here (:meth:`BatchWriter.write_built`).
        ``prerecorded``: a ``running`` row is already stored, and is finished."""

        def writes() -> tuple[Write, ...]:
            logged = self._queued_leaf(row)
            audit = store.finish_call(row) if prerecorded else store.record_call(row)
            return (audit, outbox_write(call_event(row)), *logged)

        return writes

    def _queued_leaf(self, row: AuditRow) -> tuple[Insert, ...]:
        """The write that queues the finished call in the log ``calls``, committed with its
        audit row in the same group commit (no lock, no transaction of its own: the log's
        integrator gives it its index); the row records the leaf hash its receipt is found by."""
        if self._call_log is None:
            return ()
        try:
            entry = call_entry(row)
        except Exception:  # a plug-in's value whose str(), truth or keys raise, too
            # The audit row matters more than its leaf: the call is audited, and its row says it
            # is not in the log (verify: not_logged).
            log.error("a call's entry could not be made", extra={"conclave_id": row.conclave_id})
            return ()
        queued = self._call_log.queued(entry)
        row.log_leaf_hash = queued.leaf_hash
        return (queued.write,)

    def _logged(self, row: AuditRow, outcome: Outcome) -> Outcome:
        """``outcome`` with the call's leaf hash, once its audit row (and leaf) committed."""
        if self._call_log is None or row.log_leaf_hash is None:
            return outcome
        self._call_log.notify_queued()
        outcome.log_leaf_hash = row.log_leaf_hash
        return outcome


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _read_only(registered: RegisteredTool) -> bool:
    # A tool declared read-only has no side effect to leave unaudited, so it skips the "running"
    # pre-record: one commit per call instead of two. If the store is down when it finishes, the
    # caller gets 503 and nothing happened in the world.
    declared = registered.tool.audit_read_only
    if declared is not None:
        return declared
    return bool((registered.tool.annotations or {}).get("readOnlyHint"))
