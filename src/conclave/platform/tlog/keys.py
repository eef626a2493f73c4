"""The keys of the platform's transparency logs, from settings.

A log named ``gateway-calls`` in a deployment whose ``CONCLAVE_TLOG_ORIGIN`` is
``conclave.example.com`` has the origin ``conclave.example.com/gateway-calls``, and its checkpoints
are signed by the keys of that name (C2SP: the key name matches the origin, so the verifier key a
reader holds names the log it checks).

- ``CONCLAVE_TLOG_SIGNER_KEYS`` lists signer keys in Go's ``PRIVATE+KEY+…`` form; each signs the
  log whose origin is its name, and several keys of one name all sign (the change-over of a key
  rotation). Keys of other logs are ignored, so one value serves every service.
- A log without a configured key, in embedded mode (the SQLite store), gets one generated on first
  start and kept in ``<CONCLAVE_DATA_DIR>/tlog-keys/<log name>.key`` (mode 0600, created
  atomically so two processes starting together keep the same key); it is reused afterwards.
  Outside embedded mode a missing key is an error: replicas that each generated their own key
  would sign one log with keys no reader knows.
- ``CONCLAVE_TLOG_RETIRED_VERIFIER_KEYS`` lists public keys that no longer sign but are published
  beside the current ones (older checkpoints keep verifying).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from conclave.platform.key_files import key_file_bytes
from conclave.platform.tlog.errors import LogKeyError
from conclave.platform.transparency.errors import MalformedInput
from conclave.platform.transparency.note_keys import NoteSigner, NoteVerifier
from conclave.settings import CommonSettings

LOG_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
"""A log's name: lowercase letters, digits, ``-`` and ``_``, at most 64 characters (it is part of
the origin, of a key's name and of a key file's name)."""

_SEPARATORS = re.compile(r"[\s,]+")


def check_log_name(name: object) -> str:
    """``name`` if it can name a log; :class:`MalformedInput` otherwise."""
    if not isinstance(name, str) or not LOG_NAME.fullmatch(name):
        raise MalformedInput("a log name is 1-64 of a-z, 0-9, '-' and '_', starting a-z or 0-9")
    return name


def log_origin(settings: CommonSettings, name: str) -> str:
    """The origin of the log ``name``: ``<CONCLAVE_TLOG_ORIGIN>/<name>``."""
    return f"{settings.tlog_origin}/{check_log_name(name)}"


def is_embedded(settings: CommonSettings) -> bool:
    """Whether the deployment runs embedded (on the SQLite store in its data folder)."""
    return make_url(settings.resolved_database_url()).get_backend_name() == "sqlite"


@dataclass(frozen=True)
class LogKeys:
    """The keys of one log: those that sign its checkpoints, and retired ones still published."""

    origin: str
    signers: tuple[NoteSigner, ...]
    retired: tuple[NoteVerifier, ...] = ()

    def __post_init__(self) -> None:
        if not self.signers:
            raise LogKeyError(f"no signer key for the log {self.origin!r}")
        for key in (*(signer.verifier for signer in self.signers), *self.retired):
            if key.name != self.origin:
                raise LogKeyError(f"the key {key.vkey} is not named after {self.origin!r}")

    @property
    def verifiers(self) -> tuple[NoteVerifier, ...]:
        """Every key to publish for the log: the signing ones first, then the retired ones."""
        current = tuple(signer.verifier for signer in self.signers)
        return current + tuple(key for key in self.retired if key not in current)

    def vkeys(self) -> list[str]:
        """The verifier key texts to publish (``<name>+<id>+<key>``)."""
        return [key.vkey for key in self.verifiers]


def _listed(text: str) -> list[str]:
    return [item for item in _SEPARATORS.split(text.strip()) if item]


def configured_signers(settings: CommonSettings) -> list[NoteSigner]:
    """Every signer key of ``CONCLAVE_TLOG_SIGNER_KEYS`` (:class:`MalformedKey` for a bad one)."""
    return [
        NoteSigner.from_skey(item) for item in _listed(settings.tlog_signer_keys.get_secret_value())
    ]


def log_keys(settings: CommonSettings, name: str) -> LogKeys:
    """The keys of the log ``name``: configured ones, else (embedded mode) the generated key."""
    origin = log_origin(settings, name)
    signers = [signer for signer in configured_signers(settings) if signer.name == origin]
    retired = [
        NoteVerifier.from_vkey(item) for item in _listed(settings.tlog_retired_verifier_keys)
    ]
    if not signers:
        if not is_embedded(settings):
            raise LogKeyError(
                f"no signer key named {origin!r} in CONCLAVE_TLOG_SIGNER_KEYS "
                "(generated keys are for embedded mode only)"
            )
        signers = [embedded_key(settings.tlog_key_dir() / f"{name}.key", origin)]
    return LogKeys(origin, tuple(signers), tuple(key for key in retired if key.name == origin))


def embedded_key(path: Path, origin: str) -> NoteSigner:
    """The signer key kept in ``path``, generated (named ``origin``) if the file does not exist.

    The file holds the key's ``PRIVATE+KEY+…`` text, kept as :mod:`conclave.platform.key_files`
    keeps every key file (this user's, mode 0600, in a folder others may not write; written
    whole, so two processes starting together sign with one key). :class:`LogKeyError`, naming
    the path, when the folder or the file is not so, or the file holds another origin's key."""
    content = key_file_bytes(path, lambda: NoteSigner.generate(origin).skey() + "\n", LogKeyError)
    try:
        text = content.decode("ascii")
    except UnicodeDecodeError:
        raise LogKeyError(f"{path} does not hold a signer key") from None
    signer = NoteSigner.from_skey(text.strip())
    if signer.name != origin:
        raise LogKeyError(
            f"{path} holds a key named {signer.name!r}, not after the log's origin {origin!r} "
            "(CONCLAVE_TLOG_ORIGIN changed?)"
        )
    return signer
