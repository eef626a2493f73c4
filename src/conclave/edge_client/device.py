"""The device's persistent identity: a UUID made once, and a fingerprint of the machine.

The fingerprint is a SHA-256 over facts of the machine (host name, hardware address, platform),
never the facts themselves. Kept with the UUID, it shows when an outbox (and so its identity) was
copied to another machine: the stored and the current fingerprint then differ.
"""

from __future__ import annotations

import hashlib
import platform
import socket
import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceIdentity:
    """``device_id`` (UUID) and the ``fingerprint`` recorded when it was created."""

    device_id: str
    fingerprint: str
    created_utc: str

    @property
    def on_original_machine(self) -> bool:
        """False when the identity was created on a machine with another fingerprint."""
        return self.fingerprint == machine_fingerprint()


def machine_fingerprint() -> str:
    """Hex SHA-256 over the host name, hardware address, OS and architecture."""
    node = uuid.getnode()
    # getnode() invents a random address (multicast bit set) when it finds none; a random
    # value would make the fingerprint change on every run, so it is left out.
    hardware = f"{node:012x}" if not (node >> 40) & 1 else ""
    facts = [socket.gethostname(), hardware, platform.system(), platform.machine()]
    return hashlib.sha256("\x1f".join(facts).encode()).hexdigest()


def new_identity(created_utc: str) -> DeviceIdentity:
    """A fresh identity for this machine."""
    return DeviceIdentity(str(uuid.uuid4()), machine_fingerprint(), created_utc)
