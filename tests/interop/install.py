"""Install the third-party clients the interop suite drives; ``python -m tests.interop.install``.

- npm packages (MCP Inspector, the MCP conformance suite, and a Node.js >= 22 from the npm
  package ``node``, which both need) from the committed ``node/package-lock.json``, with
  ``npm ci`` into ``node/node_modules``.
- A virtual environment of its own, ``.venv-mcp1``, for the clients that need the official
  Python SDK 1.x (the project's environment holds 2.x): the pins in ``requirements-mcp1.txt``.

Each install leaves a stamp (a hash of what it installed from); a later run with the same inputs
does nothing, so only the first run on a machine pays for the downloads. The test fixtures call
the same functions, so running the interop tests alone installs what they need too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODE_DIR = HERE / "node"
NODE_BIN = NODE_DIR / "node_modules" / ".bin"
CLIENT_VENV = HERE / ".venv-mcp1"
REQUIREMENTS = HERE / "requirements-mcp1.txt"
STAMP = ".conclave-interop-stamp"


class ClientUnavailable(RuntimeError):
    """A client could not be installed (a missing tool such as npm, or a failed download)."""


def _fingerprint(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


def _run(command: list[str], cwd: Path) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-2000:]
        raise ClientUnavailable(f"`{' '.join(command)}` failed ({result.returncode}): {output}")


def install_node_clients() -> Path:
    """``npm ci`` the pinned npm clients (once per lock file); returns their ``.bin`` folder."""
    lock = NODE_DIR / "package-lock.json"
    fingerprint = _fingerprint(lock.read_bytes())
    stamp = NODE_DIR / "node_modules" / STAMP
    if stamp.exists() and stamp.read_text() == fingerprint:
        return NODE_BIN
    npm = shutil.which("npm")
    if npm is None:
        raise ClientUnavailable("npm is not installed (the interop suite installs its clients)")
    _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], NODE_DIR)
    stamp.write_text(fingerprint)
    return NODE_BIN


def install_python_clients() -> Path:
    """Create or refresh the SDK 1.x environment (once per pin set); returns its Python."""
    python = CLIENT_VENV / ("Scripts" if os.name == "nt" else "bin") / "python"
    fingerprint = _fingerprint(REQUIREMENTS.read_bytes(), sys.version.encode())
    stamp = CLIENT_VENV / STAMP
    if stamp.exists() and stamp.read_text() == fingerprint:
        return python
    shutil.rmtree(CLIENT_VENV, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(CLIENT_VENV)], HERE)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([*pip, "-r", str(REQUIREMENTS)], HERE)
    stamp.write_text(fingerprint)
    return python


def main() -> int:
    """Install both; a client that cannot be installed is reported, and fails the command only
    under ``CONCLAVE_REQUIRE_SERVICES=1`` (CI). Elsewhere its tests skip and say why."""
    status = 0
    # Both at once: each spends its time in its own subprocess (npm, pip) and on its registry.
    with ThreadPoolExecutor(max_workers=2) as pool:
        installs = [
            pool.submit(install) for install in (install_node_clients, install_python_clients)
        ]
    for install in installs:
        try:
            install.result()
        except ClientUnavailable as exc:
            print(f"interop clients: {exc}", file=sys.stderr)
            if os.environ.get("CONCLAVE_REQUIRE_SERVICES") == "1":
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
