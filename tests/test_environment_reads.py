"""Only ``conclave.settings`` reads the environment: every other module is handed its settings.

Import contracts (``lint-imports``) cannot see this rule, since reading ``os.environ`` imports
nothing of the project, so this test scans the source. Nothing is allowed outside settings; a real
need would be listed in ``ALLOWED`` with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import conclave

PACKAGE = Path(conclave.__file__).parent
SETTINGS = PACKAGE / "settings"
# The names of ``os`` that read or change the process environment.
ENVIRONMENT_NAMES = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})
# Module path (relative to the package) -> why it may touch the environment. Empty on purpose.
ALLOWED: dict[str, str] = {}


def environment_reads(source: str) -> list[int]:
    """The lines of ``source`` that touch the environment through ``os`` (however imported)."""
    tree = ast.parse(source)
    os_names = {"os"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            os_names.update(
                alias.asname or alias.name for alias in node.names if alias.name == "os"
            )
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in {"os", "posix", "nt"}:
            if any(alias.name in ENVIRONMENT_NAMES for alias in node.names):
                lines.append(node.lineno)
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in ENVIRONMENT_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id in os_names
        ):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_scan_finds_each_way_of_reading_the_environment() -> None:
    source = (
        "import os\n"
        "import os as system\n"
        "from os import getenv\n"
        "a = os.environ['A']\n"
        "b = system.getenv('B')\n"
        "os.putenv('C', '1')\n"
        "c = os.path.join('a', 'b')\n"
    )
    assert environment_reads(source) == [3, 4, 5, 6]


def test_only_settings_reads_the_environment() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(SETTINGS):
            continue
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in ALLOWED:
            continue
        offenders.extend(
            f"{relative}:{line}" for line in environment_reads(path.read_text(encoding="utf-8"))
        )
    assert offenders == [], "read the value through conclave.settings instead"
