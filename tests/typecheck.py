"""Run mypy as pyproject.toml configures it (`python tests/typecheck.py`, the same as a bare
`mypy` from the repository's root): engine/ strictly, app/ with every function body checked,
and the test fake, which must implement the session protocol the app relies on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The mypy process the suite started when it collected test_types.py (see conftest.py).
RUNNING = pytest.StashKey["subprocess.Popen[str]"]()


def command() -> list[str]:
    return [sys.executable, "-m", "mypy"]


def start() -> subprocess.Popen[str]:
    """mypy in the background (the suite starts it first, so it overlaps the other tests)."""
    return subprocess.Popen(command(), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


if __name__ == "__main__":
    sys.exit(subprocess.run(command(), cwd=ROOT).returncode)
