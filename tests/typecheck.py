"""Run mypy over engine/ and app/ as pyproject.toml configures it (`python tests/typecheck.py`).

The folders install as `tinker_tui.engine` and `tinker_tui.app` (a package-dir mapping that
mypy cannot follow through an editable install), so mypy reads them through a tree of links
named as installed, kept in `.mypy_cache/src` so its cache stays valid between runs. The
test fake is checked too: it must implement the session protocol the app relies on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".mypy_cache"
#: The mypy process the suite started when it collected test_types.py (see conftest.py).
RUNNING = pytest.StashKey["subprocess.Popen[str]"]()
LINKS = {"__init__.py": ROOT / "tinker_tui" / "__init__.py", "app": ROOT / "app",
         "engine": ROOT / "engine", "examples": ROOT / "examples"}


def source_tree() -> Path:
    """`.mypy_cache/src/tinker_tui/{__init__.py,app,engine,examples}`, links to the repository."""
    package = CACHE / "src" / "tinker_tui"
    package.mkdir(parents=True, exist_ok=True)
    for name, target in LINKS.items():
        link = package / name
        if not (link.is_symlink() and link.resolve() == target):
            link.unlink(missing_ok=True)
            link.symlink_to(target)
    return package.parent


def command() -> list[str]:
    return [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
            "--cache-dir", str(CACHE), "tinker_tui/engine", "tinker_tui/app",
            str(ROOT / "tests" / "fake_session.py")]


def start() -> subprocess.Popen[str]:
    """mypy in the background (the suite starts it first, so it overlaps the other tests)."""
    return subprocess.Popen(command(), cwd=source_tree(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


if __name__ == "__main__":
    sys.exit(subprocess.run(command(), cwd=source_tree()).returncode)
