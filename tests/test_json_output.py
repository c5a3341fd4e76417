"""`--json` output: each command's document has the shape docs/json-output.md shows (the
same keys, the same kinds of values, null where a value may be missing), and `run --json`
prints nothing on stdout but JSON lines of that shape."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tinker_tui.app.cli import main
from tinker_tui.app.json_output import SCHEMAS, RunLines
from tinker_tui.engine.events import (
    CheckpointSaved,
    EvalCompleted,
    LogEmitted,
    RunFinished,
    RunResumed,
    RunStarted,
    SessionStarted,
    StepTrained,
)
from tinker_tui.engine.store import RunStore
from tinker_tui.engine.store.records import StoredSweep, SweepRun, record_sweep

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "json-output.md"
#: Objects whose keys are data (metric names, settings, statuses), not part of the shape.
OPEN_MAPS = {"metrics", "settings", "grid", "counts"}


def documented() -> dict[tuple[str, str | None], Any]:
    """The page's example of each shape, by its schema."""
    examples: dict[tuple[str, str | None], Any] = {}
    text = PAGE.read_text()
    for block in re.findall(r"```text\n(.*?)```", text, re.DOTALL):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines or not lines[0].startswith("{"):
            continue
        if lines[0].rstrip().endswith("}"):  # JSON lines: one object per line
            for line in lines:
                doc = json.loads(line)
                examples.setdefault((doc["schema"], doc.get("event")), doc)
        else:
            doc = json.loads(block)
            examples[(doc["schema"], None)] = doc
    return examples


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(value)]


def differences(doc: Any, got: Any, where: str = "$") -> list[str]:
    """Where `got` does not have the shape of the example `doc`."""
    if doc is None or got is None:
        return []  # null: a value that may be missing
    if _kind(doc) != _kind(got):
        return [f"{where}: {_kind(got)}, documented {_kind(doc)}"]
    if isinstance(doc, dict):
        if where.rsplit(".", 1)[-1] in OPEN_MAPS:
            return []
        out = [f"{where}: undocumented {k!r}" for k in got if k not in doc]
        out += [f"{where}: missing {k!r}" for k in doc if k not in got]
        for k in [k for k in doc if k in got]:
            out += differences(doc[k], got[k], f"{where}.{k}")
        return out
    if isinstance(doc, list) and doc:
        return [d for i, item in enumerate(got) for d in differences(doc[0], item, f"{where}[{i}]")]
    return []


def test_the_checker_sees_a_missing_key_a_new_key_and_a_changed_kind():
    doc = {"a": 1, "b": [{"c": "x"}], "metrics": {"reward": 1.0}, "d": None}
    assert differences(doc, {"a": 2.5, "b": [], "metrics": {"k": "v"}, "d": {"e": 1}}) == []
    assert differences(doc, {"a": "1", "b": [{"c": "y", "z": 1}], "metrics": {}}) == [
        "$: missing 'd'",
        "$.a: string, documented number",
        "$.b[0]: undocumented 'z'",
    ]


def test_the_page_documents_every_schema():
    assert {schema for schema, _ in documented()} == set(SCHEMAS.values())
    nav = (ROOT / "mkdocs.yml").read_text()
    assert "json-output.md" in nav


def _events() -> list:
    return [
        RunStarted(
            time=100.0,
            run_id="r1",
            name="demo",
            backend="local",
            base_model="tiny",
            max_steps=4,
            start_step=0,
            config={"seed": 1, "learning_rate": 1e-3},
            run_name="first",
        ),
        SessionStarted(time=100.5, backend="local", base_model="tiny"),
        StepTrained(
            time=101.0,
            step=1,
            policy_version=1,
            metrics={"reward/mean": 0.25, "loss": float("nan")},
        ),
        CheckpointSaved(
            time=101.5,
            step=1,
            kind="state",
            name="step-000001",
            path="/ck/step-000001",
            resume_state={
                "step": 1,
                "policy_version": 1,
                "next_position": 2,
                "pending": [],
                "next_group_id": 3,
                "warmup_done": True,
            },
        ),
        StepTrained(time=102.0, step=2, policy_version=2, metrics={"reward/mean": 0.5}),
        EvalCompleted(time=102.5, step=2, policy_version=2, metrics={"eval/reward": 0.4}),
        RunFinished(time=103.0, status="stopped", final_step=2, reason="stopped by user"),
    ]


async def _store(path: Path) -> None:
    store = await RunStore.open(path)
    try:
        for event in _events():
            store.handle(event)
        await store.flush()
        store.handle(
            RunStarted(
                time=150.0,
                run_id="r1",
                name="demo",
                backend="local",
                base_model="tiny",
                max_steps=4,
                start_step=1,
                config={"seed": 1, "learning_rate": 1e-3},
            )
        )
        store.handle(SessionStarted(time=150.0, backend="local", base_model="tiny"))
        await store.flush()
        counts = await store.reconcile("r1", 1)
        store.handle(
            RunResumed(
                time=151.0,
                run_id="r1",
                step=1,
                checkpoint="step-000001",
                steps_undone=counts["steps_removed"],
                down_seconds=47.0,
            )
        )
        store.handle(
            StepTrained(time=152.0, step=2, policy_version=2, metrics={"reward/mean": 0.75})
        )
        store.handle(RunFinished(time=153.0, status="completed", final_step=2))
        store.handle(
            RunStarted(
                time=200.0,
                run_id="r2",
                name="demo",
                backend="local",
                base_model="tiny",
                max_steps=4,
                start_step=0,
                config={"seed": 2, "learning_rate": 1e-3},
            )
        )
        store.handle(LogEmitted(time=200.5, level="info", message="hello"))
        await store.flush()
    finally:
        await store.close()
    record_sweep(
        path,
        StoredSweep(
            sweep_id="sweep-1",
            task="demo",
            task_spec="demo",
            grid={"seed": [1, 2, 3]},
            run_args=[],
            parallel=1,
            created_at=99.0,
            runs=(
                SweepRun("sweep-1", 0, "r1", {"seed": 1}, "completed", 0),
                SweepRun("sweep-1", 1, "r2", {"seed": 2}, "running"),
                SweepRun("sweep-1", 2, "r3", {"seed": 3}),
            ),
        ),
    )


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("json") / "runs.db"
    asyncio.run(_store(path))
    return path


def _json_of(capsys, *argv: str) -> dict[str, Any]:
    assert main(list(argv)) == 0
    out = capsys.readouterr().out
    return json.loads(out)


@pytest.mark.parametrize(
    "argv",
    [
        ("runs", "--json"),
        ("show", "r1", "--json"),
        ("show", "r2", "--json"),
        ("compare", "r1", "r2", "--json"),
        ("cost", "r1", "--json"),
        ("sweep", "--status", "--json"),
        ("sweep", "--status", "sweep-1", "--json"),
    ],
)
def test_each_commands_json_has_its_documented_shape(db, capsys, argv):
    got = _json_of(capsys, *argv, "--db", str(db))
    assert got["schema"] == SCHEMAS[argv[0]]
    assert differences(documented()[(got["schema"], None)], got) == []


def test_the_json_says_what_the_store_holds(db, capsys):
    runs = _json_of(capsys, "runs", "--json", "--db", str(db))["runs"]
    assert [r["run_id"] for r in runs] == ["r2", "r1"]
    r1 = runs[1]
    assert (r1["name"], r1["status"], r1["step"], r1["reward"], r1["checkpoint_step"]) == (
        "first",
        "completed",
        2,
        0.75,
        1,
    )
    assert r1["down_seconds"] == 47.0 and r1["duration_seconds"] == 53.0 - 47.0
    assert runs[0]["status"] == "interrupted" and runs[0]["reward"] is None

    show = _json_of(capsys, "show", "r1", "--json", "--db", str(db))
    assert [(s["step"], s["metrics"]["reward/mean"]) for s in show["steps"]] == [
        (1, 0.25),
        (2, 0.75),
    ]  # the step the resume undid, gone; its redo, kept
    assert show["steps"][0]["metrics"]["loss"] is None  # NaN: not a JSON number
    assert [c["name"] for c in show["checkpoints"]] == ["step-000001"]
    assert show["evals"] == []  # the evaluation of the undone step went with it
    assert [s["time"] for s in show["sessions"]] == [100.5, 150.0]
    assert show["resumes"] == [
        {
            "time": 151.0,
            "step": 1,
            "checkpoint": "step-000001",
            "steps_undone": 1,
            "groups_requeued": 0,
            "scenarios_pending": 0,
            "down_seconds": 47.0,
        }
    ]
    assert show["finished"]["status"] == "completed"
    assert "cause" in show["finished"]  # typed, for a script (null for old stores)

    compare = _json_of(capsys, "compare", "r1", "r2", "--json", "--db", str(db))
    assert compare["differing"] == ["seed"]
    assert [r["settings"] for r in compare["runs"]] == [{"seed": 1}, {"seed": 2}]
    assert compare["runs"][0]["best_reward"] == {"step": 2, "value": 0.75}

    cost = _json_of(capsys, "cost", "r1", "--json", "--db", str(db))
    assert cost["billed"] is None and "not billed" in cost["note"]

    sweep = _json_of(capsys, "sweep", "--status", "--json", "--db", str(db))
    assert sweep["counts"] == {"completed": 1, "running": 1, "pending": 1}
    assert [r["run"] and r["run"]["run_id"] for r in sweep["runs"]] == ["r1", "r2", None]


def test_run_lines_are_json_lines_of_the_documented_shape():
    class Out:
        def __init__(self) -> None:
            self.text = ""

        def write(self, s: str) -> None:
            self.text += s

        def flush(self) -> None:
            pass

    out = Out()
    lines = RunLines(out)  # type: ignore[arg-type]
    for event in _events():
        lines.handle(event)
    lines.handle(RunResumed(time=151.0, run_id="r1", step=1, checkpoint="step-000001"))
    docs = documented()
    got = [json.loads(line) for line in out.text.splitlines()]
    assert [g["event"] for g in got] == [
        "started",
        "session",
        "step",
        "checkpoint",
        "step",
        "eval",
        "finished",
        "resumed",
    ]
    for line in got:
        assert differences(docs[(SCHEMAS["run"], line["event"])], line) == [], line
    assert got[2]["metrics"] == {"reward/mean": 0.25, "loss": None}


def test_run_json_prints_only_json_lines_on_stdout(tmp_path):
    """A real run on the local backend: stdout is JSON lines a script can read as they
    come; the text a person reads goes to stderr."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            "example",
            "--json",
            "--steps",
            "2",
            "--backend",
            "local",
            "--db",
            str(tmp_path / "runs.db"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = [json.loads(line) for line in done.stdout.splitlines()]
    assert got[0]["event"] == "started" and got[-1]["event"] == "finished"
    assert got[-1]["cause"] == "max_steps"
    assert [g["step"] for g in got if g["event"] == "step"] == [1, 2]
    docs = documented()
    for line in got:
        assert differences(docs[(SCHEMAS["run"], line["event"])], line) == [], line
    assert "step    2/2" in done.stderr
