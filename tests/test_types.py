"""The type check runs in the default suite: mypy over engine/ (strict) and app/ (every
function body checked), as pyproject.toml configures it, finds no errors. Skipped when mypy
is not installed (it is in the `dev` extra)."""

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                                reason="mypy is not installed (pip install -e '.[dev]')")


def test_mypy_finds_no_errors(request):
    import typecheck

    mypy = request.config.stash.get(typecheck.RUNNING, None) or typecheck.start()
    output, _ = mypy.communicate(timeout=900)
    assert mypy.returncode == 0, output
    assert "Success: no issues found" in output
