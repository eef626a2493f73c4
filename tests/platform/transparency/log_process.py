"""A process that appends to or integrates a stored log and stops inside the transaction, for the
kill -9 tests: ``python -m tests.platform.transparency.log_process '<json>'``.

The JSON names the store (``url``, optional PostgreSQL ``schema``), the log's signer key
(``skey``), the ``action`` (``append`` with ``entries`` as text, or ``integrate``). When the
transaction has written everything and not yet committed, the process prints ``paused`` and
waits to be killed.
"""

from __future__ import annotations

import asyncio
import json
import sys

from conclave.platform.db.engine import create_engine
from conclave.platform.tlog import LogKeys, TransparencyLog
from conclave.platform.transparency import NoteSigner

PAUSED = "paused"


async def _pause() -> None:
    print(PAUSED, flush=True)
    await asyncio.Event().wait()  # until killed


async def main(order: dict[str, str | list[str]]) -> None:
    engine = create_engine(str(order["url"]), schema=str(order["schema"]) or None)
    signer = NoteSigner.from_skey(str(order["skey"]))
    log = await TransparencyLog.open(
        engine, "calls", LogKeys(signer.name, (signer,)), checkpoint_interval=0.0
    )
    if order["action"] == "append":
        await log.append([entry.encode() for entry in order["entries"]], inside_transaction=_pause)
    else:
        await log.integrate(inside_transaction=_pause)
    print("committed", flush=True)  # never reached when killed


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
