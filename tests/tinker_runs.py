"""A one-step run on the Tinker backend, through the real SDK and the service double: the
checkpoint the eval and chat tests read a Tinker run's weights from."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tinker_double import TinkerDouble

from tinker_tui.app.cli import main
from tinker_tui.engine.local import DEFAULT_BASE_MODEL


@contextmanager
def one_step_tinker_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: str = "example"
) -> Iterator[tuple[TinkerDouble, Path, str]]:
    """(the double, the store, the run's id) for a one-step run of `task`, two samples of
    one group. They tie now and then (exit 4, trained nothing); the step's checkpoint is
    kept either way, and that is what the tests read."""
    with TinkerDouble(tmp_path / "service") as double:
        for name, value in double.env().items():
            monkeypatch.setenv(name, value)
        db = tmp_path / "runs.db"
        run = ["run", task, "--backend", "tinker", "--no-ui", "--db", str(db)]
        run += ["--base-model", DEFAULT_BASE_MODEL, "--steps", "1", "--group-size", "2"]
        run += ["--groups-per-step", "1", "--eval-every", "0", "--warmup-steps", "0"]
        assert main(run) in (0, 4)
        with sqlite3.connect(db) as conn:
            (run_id,) = conn.execute("SELECT run_id FROM runs").fetchone()
        yield double, db, run_id
