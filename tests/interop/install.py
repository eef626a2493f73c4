"""Install the third-party clients the interop suite drives; ``python -m tests.interop.install``.

- npm packages (MCP Inspector, the MCP conformance suite, and a Node.js >= 22 from the npm
  package ``node``, which both need) from the committed ``node/package-lock.json``, with
  ``npm ci`` into ``node/node_modules``.
- A virtual environment of its own, ``.venv-mcp1``, for the clients that need the official
  Python SDK 1.x (the project's environment holds 2.x): the pins in ``requirements-mcp1.txt``.
- The MCP servers the gateway governs as upstreams (tests/gateway/upstreams): the npm package
  ``@modelcontextprotocol/server-everything`` (in the same lock file) and, in a virtual environment
  of its own (``.venv-servers``), ``mcp-server-time`` and ``mcp-server-git`` from
  ``requirements-servers.txt``.

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
SERVER_VENV = HERE / ".venv-servers"
SERVER_REQUIREMENTS = HERE / "requirements-servers.txt"
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


def _install_venv(venv: Path, requirements: Path) -> Path:
    """Create or refresh ``venv`` from ``requirements`` (once per pin set); returns its Python."""
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    fingerprint = _fingerprint(requirements.read_bytes(), sys.version.encode())
    stamp = venv / STAMP
    if stamp.exists() and stamp.read_text() == fingerprint:
        return python
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)], HERE)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([*pip, "-r", str(requirements)], HERE)
    stamp.write_text(fingerprint)
    return python


def install_python_clients() -> Path:
    """Create or refresh the SDK 1.x environment (once per pin set); returns its Python."""
    return _install_venv(CLIENT_VENV, REQUIREMENTS)


def install_python_servers() -> Path:
    """Create or refresh the environment of the Python MCP servers; returns its Python."""
    return _install_venv(SERVER_VENV, SERVER_REQUIREMENTS)


def main() -> int:
    """Install both; a client that cannot be installed is reported, and fails the command only
    under ``CONCLAVE_REQUIRE_SERVICES=1`` (CI). Elsewhere its tests skip and say why."""
    status = 0
    # All at once: each spends its time in its own subprocess (npm, pip) and on its registry.
    every = (install_node_clients, install_python_clients, install_python_servers)
    with ThreadPoolExecutor(max_workers=len(every)) as pool:
        installs = [pool.submit(install) for install in every]
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
