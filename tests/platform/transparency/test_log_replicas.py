"""Two replicas appending at once, each from several tasks and each running its integrator, make
one log: every leaf once, every leaf proven by the latest signed checkpoint, every checkpoint
extending the one before."""

from __future__ import annotations

import asyncio
import random

from sqlalchemy.ext.asyncio import AsyncEngine

from conclave.platform.tlog import LogIntegrator, TransparencyLog, audit_log
from conclave.platform.transparency import VerifierSet
from tests.conftest import eventually
from tests.platform.transparency.stored_logs import (
    open_test_log,
    second_replica,
    stored_leaves,
    test_keys,
    verify_as_a_reader,
)

TASKS, BATCHES = 4, 12


async def test_two_replicas_appending_at_once_make_one_log(log_engine: AsyncEngine) -> None:
    keys = test_keys()
    other_engine = await second_replica(log_engine)
    try:
        replicas = [
            await open_test_log(engine, keys, checkpoint_interval=0.1)
            for engine in (log_engine, other_engine)
        ]
        integrators = [LogIntegrator([log], poll_seconds=0.3) for log in replicas]
        for integrator in integrators:
            await integrator.start()
        appended: dict[bytes, int] = {}

        async def writer(log: TransparencyLog, replica: int, task: int) -> None:
            rng = random.Random(f"{replica}/{task}")
            for batch in range(BATCHES):
                entries = [
                    f"r{replica} t{task} b{batch} #{i}".encode() for i in range(rng.randint(1, 10))
                ]
                indices = await log.append(entries)
                appended.update(zip(entries, indices, strict=True))
                await asyncio.sleep(rng.random() / 100)

        try:
            await asyncio.gather(
                *(
                    writer(log, replica, task)
                    for replica, log in enumerate(replicas)
                    for task in range(TASKS)
                )
            )

            async def all_integrated() -> bool:
                return (await replicas[0].state()).integrated_size == len(appended)

            await eventually(all_integrated, timeout=60)
        finally:
            for integrator in integrators:
                await integrator.stop()

        # Each entry once, at the index its append returned.
        assert sorted(appended.values()) == list(range(len(appended)))
        assert {data: index for index, data in await stored_leaves(log_engine, replicas[0])} == (
            appended
        )
        # Whichever replica held the lock signed, the checkpoints are of one history.
        verified = await verify_as_a_reader(other_engine, replicas[1], leaves=len(appended))
        assert verified.checkpoint.size == len(appended)
        assert len(verified.checkpoint_sizes) == 1 + sum(i.checkpoints for i in integrators)
        assert all(i.failures == 0 for i in integrators)
        audit = await audit_log(log_engine, "calls", VerifierSet(keys.verifiers))
        assert audit.ok, audit.findings
    finally:
        await other_engine.dispose()
