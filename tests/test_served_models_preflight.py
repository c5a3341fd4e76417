"""Before a Tinker run starts, the service is asked (through the real tinker SDK, against
the double serving a current lineup from the real-format fixture) whether it serves the
base model: a retired one stops the command in seconds, exit 2, one line naming what is
served and the closest name, before anything of the run is stored or a session is made."""

from __future__ import annotations

import sqlite3
import time

import pytest
import tinker
from tinker_double import API_KEY, TinkerDouble

from tinker_tui.app.cli import main
from tinker_tui.engine.backend.served_models import (
    check_served,
    not_served_problem,
    served_model_names,
)

#: Tinker's recommended replacements for what it retired on 2026-06-12 (model-deprecations).
LINEUP = ("Qwen/Qwen3.6-35B-A3B", "Qwen/Qwen3.6-27B")
RETIRED = "Qwen/Qwen3-30B-A3B-Instruct-2507"


def _double(tmp_path, qwen3_folder) -> TinkerDouble:
    return TinkerDouble(
        tmp_path / "service",
        served_models={name: qwen3_folder for name in LINEUP},
        only_served=True,
    )


def test_a_retired_model_stops_the_run_in_seconds_naming_what_is_served(
    qwen3_folder, tmp_path, monkeypatch, capsys
):
    db = tmp_path / "runs.db"
    with _double(tmp_path, qwen3_folder) as double:
        for name, value in double.env().items():
            monkeypatch.setenv(name, value)
        started = time.monotonic()
        code = main(
            ["run", "example", "--backend", "tinker", "--no-ui", "--db", str(db)]
            + ["--base-model", RETIRED]
        )
        took = time.monotonic() - started
        calls = list(double.service.calls)
    _, err = capsys.readouterr()
    assert code == 2, err
    assert took < 10, took
    [line] = err.strip().splitlines()
    assert line == (
        f"tinker-tui: error: {RETIRED} is not served; served: Qwen/Qwen3.6-27B, "
        "Qwen/Qwen3.6-35B-A3B (did you mean 'Qwen/Qwen3.6-35B-A3B'?)"
    )
    assert ("GET", "get_server_capabilities", 200) in calls
    assert not [path for _, path, _ in calls if path == "create_session"]
    if db.exists():  # nothing of the run was stored
        with sqlite3.connect(db) as conn:
            tables = {t for (t,) in conn.execute("select name from sqlite_master")}
            assert "runs" not in tables or not conn.execute("select * from runs").fetchall()


def test_the_sdk_is_told_what_the_double_serves_and_a_served_model_passes(
    qwen3_folder, tmp_path, monkeypatch
):
    with _double(tmp_path, qwen3_folder) as double:
        for name, value in double.env().items():
            monkeypatch.setenv(name, value)
        assert sorted(served_model_names() or []) == sorted(LINEUP)
        check_served("Qwen/Qwen3.6-35B-A3B")  # served: no error
        service = tinker.ServiceClient(base_url=double.base_url, api_key=API_KEY)
        with pytest.raises(tinker.BadRequestError, match="is not supported"):
            service.create_lora_training_client(base_model=RETIRED, rank=4).result()
    # an unknown name with nothing close lists what is served, without a suggestion
    problem = not_served_problem("meta-llama/Llama-3.1-8B", list(LINEUP))
    assert problem is not None and "did you mean" not in problem
    assert not_served_problem("anything", []) is None  # nothing listed: nothing judged


def test_a_service_that_does_not_answer_is_not_judged_here(monkeypatch):
    """The SDK retries a silent service for minutes; the preflight gives up after its wait
    and leaves the run's own reporting (its waits, backend_unreachable_after) to say so."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("TINKER_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("TINKER_API_KEY", "tml-nobody-answers")
    started = time.monotonic()
    assert served_model_names(wait=1.0) is None
    check_served("Qwen/Qwen3.6-35B-A3B", wait=1.0)  # no answer: no error
    assert time.monotonic() - started < 4
