"""The errors of the stored transparency logs, in the first layer's hierarchy
(:mod:`conclave.platform.transparency.errors`): a caller that already tells apart malformed
input, failed checks and missing hashes needs nothing new to handle these."""

from __future__ import annotations

from conclave.platform.transparency.errors import (
    MalformedInput,
    OutOfRange,
    TransparencyError,
    VerificationFailed,
)


class BeyondIntegrated(OutOfRange):
    """A leaf index or tree size beyond what the log has integrated (and signed) so far.

    Not a permanent refusal like its parent: the same request may succeed after the next
    checkpoint."""


class CheckpointNotFound(TransparencyError, LookupError):
    """No checkpoint of that tree size: the log signs the sizes it integrated at, not every size
    up to its latest."""


class LeafTooLarge(MalformedInput):
    """A leaf, or a batch of leaves, larger than the log accepts."""


class LogCorrupted(VerificationFailed):
    """The stored log contradicts itself (a missing leaf below the sequenced size, a stored
    frontier that does not fold to the stored root): the integrator refuses to sign anything on
    top of it. :func:`conclave.platform.tlog.audit.audit_log` says what is wrong."""


class LogKeyError(TransparencyError):
    """A log's signer key cannot be had: none configured outside embedded mode, a key file that
    others may read, or a key named after another origin."""
