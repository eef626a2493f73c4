"""The shield around work that must finish (a finished call's audit row) holds wherever an anyio
cancel scope could cancel the task, and costs nothing where none could."""

from __future__ import annotations

import asyncio

import anyio

from conclave.platform.shielding import shielded


async def _finish_shielded(finished: list[str], cancel: anyio.CancelScope) -> None:
    with shielded():
        cancel.cancel()  # lands while the work below is still to do
        await asyncio.sleep(0.01)
        finished.append("recorded")
    await asyncio.sleep(1)  # the cancellation arrives here, after the shielded work
    finished.append("not cancelled")


async def test_a_cancelled_scope_waits_for_the_shielded_work() -> None:
    finished: list[str] = []
    with anyio.CancelScope() as scope:
        await _finish_shielded(finished, scope)
    assert scope.cancelled_caught
    assert finished == ["recorded"]


async def test_a_cancelled_task_group_waits_for_the_shielded_work_of_its_task() -> None:
    finished: list[str] = []
    async with anyio.create_task_group() as group:
        group.start_soon(_finish_shielded, finished, group.cancel_scope)
    assert finished == ["recorded"]


async def test_nested_scopes_are_shielded_from_too() -> None:
    finished: list[str] = []
    with anyio.CancelScope() as outer:
        with anyio.CancelScope():
            await _finish_shielded(finished, outer)
    assert finished == ["recorded"]


async def test_a_task_no_scope_holds_gets_no_shield() -> None:
    """A plain request task: nothing anyio could cancel, so no scope is made (the saving)."""
    assert not isinstance(shielded(), anyio.CancelScope)
    with anyio.CancelScope():  # noqa: ASYNC100 - held, never cancelled: what shielded() sees
        assert isinstance(shielded(), anyio.CancelScope)
    assert not isinstance(shielded(), anyio.CancelScope)  # left: no scope holds it again
