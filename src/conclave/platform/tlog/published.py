"""The logs a service publishes over HTTP, and what its routes ask of them: checkpoints, leaves,
proofs, receipts and consistency bundles, with the log's errors turned into problems.

A service that keeps logs puts a :class:`PublishedLogs` on ``app.state.tlogs`` and mounts
:data:`conclave.platform.tlog.api.tlog_router`; the routes find the logs there. The mapping of
errors is the one place where the transparency hierarchy (which has no HTTP status, since the
offline verifier runs it too) meets the platform's problem codes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

from conclave.platform.auth import Principal
from conclave.platform.errors import Forbidden, NotFound, Unavailable, Unprocessable
from conclave.platform.problem_types import ProblemCode
from conclave.platform.tlog.errors import BeyondIntegrated, CheckpointNotFound, LogCorrupted
from conclave.platform.tlog.log import TransparencyLog
from conclave.platform.tlog.records import StoredLeaf
from conclave.platform.transparency.errors import MalformedInput, SubtreeNotStored
from conclave.platform.transparency.hashing import check_tree_size
from conclave.platform.transparency.receipt import ConsistencyBundle, Receipt

log = logging.getLogger(__name__)

LeafReaders = Callable[[Principal, bytes], bool]
"""Whether a caller may read a leaf's data (the entry): the layer that appends knows whose it is."""


def operators_only(principal: Principal, _data: bytes) -> bool:
    """The default leaf policy: only operators read leaf data."""
    return principal.is_operator


class PublishedLogs:
    """The logs of one service, by name, and the reads its routes serve."""

    def __init__(
        self,
        logs: Iterable[TransparencyLog] = (),
        leaf_readers: Mapping[str, LeafReaders] | None = None,
    ) -> None:
        self._logs = {log.name: log for log in logs}
        self._leaf_readers = dict(leaf_readers or {})

    def __contains__(self, name: object) -> bool:
        return name in self._logs

    def names(self) -> list[str]:
        """The names of the logs published, sorted."""
        return sorted(self._logs)

    def get_log_or_404(self, name: str) -> TransparencyLog:
        """The log ``name``; 404 ``LOG_NOT_FOUND`` if this service publishes none of that name."""
        found = self._logs.get(name)
        if found is None:
            raise NotFound(
                f"no transparency log named {name[:64]!r} here", code=ProblemCode.LOG_NOT_FOUND
            )
        return found

    async def latest_checkpoint(self, name: str) -> str:
        """The latest signed checkpoint of the log ``name``."""
        with log_problems():
            return await self.get_log_or_404(name).latest_checkpoint()

    async def checkpoint(self, name: str, size: int) -> str:
        """The signed checkpoint of ``size`` leaves of the log ``name``."""
        with log_problems():
            return await self.get_log_or_404(name).checkpoint(size)

    async def leaf(self, name: str, index: int, principal: Principal) -> StoredLeaf:
        """The integrated leaf ``index`` of the log ``name``, if ``principal`` may read its data
        (the log's leaf policy; operators only by default), else 403 ``FORBIDDEN``. Leaves are
        public in all but their data (their hashes are in every proof): a refusal reveals that
        the index exists, which a receipt reveals anyway."""
        with log_problems():
            found = await self.get_log_or_404(name).leaf(index)
        may_read = self._leaf_readers.get(name, operators_only)
        if not may_read(principal, found.data):
            raise Forbidden(f"leaf {index} of the log {name!r} is not yours to read")
        return found

    async def inclusion_proof(self, name: str, index: int, size: int) -> list[bytes]:
        """The inclusion proof of leaf ``index`` in the tree of ``size`` leaves."""
        with log_problems():
            return await self.get_log_or_404(name).inclusion_proof(index, size)

    async def consistency_proof(self, name: str, old_size: int, new_size: int) -> list[bytes]:
        """The consistency proof from ``old_size`` to ``new_size`` leaves. From the empty tree
        it is empty (every tree extends it; RFC 9162 defines no proof), once ``new_size`` is
        checked to be in the log."""
        log = self.get_log_or_404(name)
        with log_problems():
            if old_size == 0:
                check_tree_size(new_size)
                integrated = (await log.state()).integrated_size
                if new_size > integrated:
                    raise BeyondIntegrated(
                        f"tree size {new_size} is beyond the log, integrated up to {integrated}"
                    )
                return []
            return await log.consistency_proof(old_size, new_size)

    async def consistency_bundle(
        self, name: str, old_size: int, new_size: int
    ) -> ConsistencyBundle:
        """The two signed checkpoints and the proof between them (``conclave.consistency/v1``);
        404 ``CHECKPOINT_NOT_FOUND`` unless the log signed both sizes."""
        proof = await self.consistency_proof(name, old_size, new_size)
        old = await self.checkpoint(name, old_size)
        new = await self.checkpoint(name, new_size)
        return ConsistencyBundle(old, new, tuple(proof))

    async def receipt(self, name: str, index: int) -> Receipt:
        """A receipt of leaf ``index`` against the latest checkpoint (``conclave.receipt/v1``);
        404 ``BEYOND_LOG`` while the leaf is not under a signed checkpoint yet."""
        log = self.get_log_or_404(name)
        with log_problems():
            return await log.receipt(index)

    async def receipt_by_hash(self, name: str, hashed: bytes) -> Receipt:
        """A receipt of the first leaf of this leaf hash against the latest checkpoint; 404
        ``BEYOND_LOG`` while it is sequenced but not yet under a checkpoint, 404
        ``LEAF_NOT_FOUND`` while the log holds no leaf of this hash (a leaf queued moments ago is
        there once the next checkpoint is signed)."""
        log = self.get_log_or_404(name)
        with log_problems():
            where = await log.locate(hashed)
        if where.index is None:
            raise NotFound(
                f"no leaf of this hash is in the log {name!r}; a leaf queued moments ago is "
                "there once the next checkpoint is signed (at most every "
                f"{log.checkpoint_interval:g} s)",
                code=ProblemCode.LEAF_NOT_FOUND,
            )
        return await self.receipt(name, where.index)


def leaf_hash_of_hex(text: str) -> bytes:
    """The leaf hash written as 64 hexadecimal digits; 422 ``INVALID_LEAF_HASH`` otherwise."""
    if len(text) != 64 or not all(c in _HEX_DIGITS for c in text):
        raise Unprocessable(
            "a leaf hash is 64 hexadecimal digits", code=ProblemCode.INVALID_LEAF_HASH
        )
    return bytes.fromhex(text)


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


@contextmanager
def log_problems() -> Iterator[None]:
    """Turn the logs' refusals of a request into problems: beyond the latest checkpoint 404
    ``BEYOND_LOG``, a size never signed 404 ``CHECKPOINT_NOT_FOUND``, numbers that cannot be
    proven 422 ``INVALID_LOG_RANGE``, a stored log that contradicts itself 503 ``LOG_CORRUPTED``."""
    try:
        yield
    except BeyondIntegrated as error:
        raise NotFound(str(error), code=ProblemCode.BEYOND_LOG) from None
    except CheckpointNotFound as error:
        raise NotFound(str(error), code=ProblemCode.CHECKPOINT_NOT_FOUND) from None
    except MalformedInput as error:
        raise Unprocessable(str(error), code=ProblemCode.INVALID_LOG_RANGE) from None
    except (LogCorrupted, SubtreeNotStored) as error:
        # Nothing the request did: the stored log contradicts itself (a row edited by hand). Said
        # as such, and logged for the operator, rather than an anonymous 500.
        log.error("a transparency log read met a corrupted log: %s", error)
        raise Unavailable(str(error), code=ProblemCode.LOG_CORRUPTED) from None
