"""Session starts, resumes and tracker reports are events with fields (schema version 9),
not log text: they round-trip through the store, an older store (`data/store_v8.db`, written
by the schema-8 code) still reads the same and migrates into the new columns, and no reader
of the store or the app parses a message's text."""

from __future__ import annotations

import ast
import shutil
import sqlite3
from pathlib import Path

from tinker_tui.engine.events import (
    LogEmitted,
    RunFinished,
    RunResumed,
    RunStarted,
    SessionStarted,
    StepTrained,
    TrackerReported,
)
from tinker_tui.engine.store import SCHEMA_VERSION, RunStore, StoreReader

ROOT = Path(__file__).resolve().parent.parent
V8_STORE = Path(__file__).parent / "data" / "store_v8.db"


def _started(time: float, start_step: int = 0) -> RunStarted:
    return RunStarted(
        time=time,
        run_id="r1",
        name="demo",
        backend="local",
        base_model="tiny",
        max_steps=6,
        start_step=start_step,
        config={},
    )


async def test_session_resume_and_tracker_events_come_back_with_their_fields(tmp_path):
    said = [
        SessionStarted(time=100.5, backend="local", base_model="tiny"),
        TrackerReported(
            time=101.0, level="info", tracker="tensorboard", message="TensorBoard: logging to tb/r1"
        ),
        LogEmitted(time=101.5, level="info", message="W&B: only looks like a tracker"),
        RunResumed(
            time=157.0,
            run_id="r1",
            step=2,
            checkpoint="step-000002",
            steps_undone=2,
            groups_requeued=3,
            scenarios_pending=1,
            down_seconds=49.5,
        ),
    ]
    store = await RunStore.open(tmp_path / "runs.db")
    try:
        store.handle(_started(100.0))
        for event in said:
            store.handle(event)
        await store.flush()
        back = await store.events(await store.run("r1"), kinds={LogEmitted})
        assert back == said  # each of its own type; a look-alike line stays a line
        assert await store.down_seconds("r1") == 49.5
    finally:
        await store.close()
    with sqlite3.connect(tmp_path / "runs.db") as db:  # in columns, not in the log's text
        assert db.execute("SELECT message, tracker FROM log ORDER BY id").fetchall() == [
            ("TensorBoard: logging to tb/r1", "tensorboard"),
            ("W&B: only looks like a tracker", None),
        ]
        assert db.execute("SELECT backend, base_model FROM sessions").fetchall() == [
            ("local", "tiny")
        ]
        assert db.execute(
            "SELECT step, checkpoint, steps_undone, groups_requeued, "
            "scenarios_pending, down_seconds FROM resumes"
        ).fetchall() == [(2, "step-000002", 2, 3, 1, 49.5)]


def test_the_text_of_a_session_or_a_resume_is_made_from_its_fields():
    assert (
        SessionStarted(
            time=0.0, backend="tinker", base_model="Qwen/Qwen3-8B", message="ignored"
        ).message
        == "starting tinker backend, base model Qwen/Qwen3-8B"
    )
    assert RunResumed(time=0.0, run_id="r1", step=0).message == (
        "resuming run r1 from the start (no confirmed checkpoint): 0 later step(s) undone, "
        "0 group(s) to run again (0 scenario(s) drawn but untrained)"
    )


def _summary(events) -> list[tuple]:
    out = []
    for e in events:
        if isinstance(e, RunResumed):
            out.append(
                ("resumed", e.time, e.step, e.checkpoint, e.steps_undone, e.scenarios_pending)
            )
        elif isinstance(e, SessionStarted):
            out.append(("session", e.time, e.backend, e.base_model))
        elif isinstance(e, TrackerReported):
            out.append(("tracker", e.time, e.tracker, e.message))
        elif isinstance(e, LogEmitted):
            out.append(("log", e.time, e.message))
        elif isinstance(e, StepTrained):
            out.append(("step", e.time, e.step))
    return out


EXPECTED_R1 = [
    ("session", 100.5, "local", "tiny"),
    ("tracker", 101.0, "tensorboard", "TensorBoard: logging to tensorboard/r1"),
    ("log", 101.5, "W&B is not a tracker line"),
    ("step", 102.0, 1),
    ("step", 103.0, 2),
    (
        "tracker",
        105.5,
        "wandb",
        "W&B: offline run saved: files in wandb/; upload with `wandb sync x`",
    ),
    ("log", 106.0, "event loop lag over the run: p99 1.0 ms, max 2.0 ms (10 samples)"),
    ("session", 156.0, "local", "tiny"),
    ("resumed", 157.0, 2, "step-000002", 2, 1),
    ("step", 160.0, 3),
    ("step", 161.0, 4),
    ("step", 162.0, 5),
    ("step", 163.0, 6),
    ("log", 164.0, "event loop lag over the run: p99 1.0 ms, max 2.0 ms (10 samples)"),
]


async def test_a_version_8_store_reads_as_events_without_being_changed(tmp_path):
    path = tmp_path / "old.db"
    shutil.copy(V8_STORE, path)
    before = path.read_bytes()
    async with await StoreReader.open_readonly(path) as reader:
        assert reader.schema_version == 8
        r1 = await reader.run("r1")
        events = await reader.events(r1)
        assert _summary(events) == EXPECTED_R1
        (resumed,) = [e for e in events if isinstance(e, RunResumed)]
        assert resumed.down_seconds == 50.0  # as the migration will record it
        assert await reader.down_seconds("r1") == 50.0  # 106.0 (last line) to 156.0
        assert await reader.down_seconds("r2") == 0.0
    assert path.read_bytes() == before


async def test_a_version_8_store_migrates_its_lines_into_the_new_columns(tmp_path):
    path = tmp_path / "old.db"
    shutil.copy(V8_STORE, path)
    store = await RunStore.open(path)  # migrates
    await store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute(
            "SELECT run_id, time, backend, base_model FROM sessions ORDER BY id"
        ).fetchall() == [
            ("r1", 100.5, "local", "tiny"),
            ("r1", 156.0, "local", "tiny"),
            ("r2", 200.5, "local", "tiny"),
        ]
        assert db.execute(
            "SELECT run_id, step, checkpoint, steps_undone, groups_requeued, "
            "scenarios_pending, down_seconds FROM resumes"
        ).fetchall() == [("r1", 2, "step-000002", 2, 0, 1, 50.0)]
        # what became columns left the log; what stays has its tracker, or none
        assert db.execute(
            "SELECT message, tracker FROM log WHERE run_id = 'r1' ORDER BY id"
        ).fetchall() == [
            ("TensorBoard: logging to tensorboard/r1", "tensorboard"),
            ("W&B is not a tracker line", None),
            ("W&B: offline run saved: files in wandb/; upload with `wandb sync x`", "wandb"),
            ("event loop lag over the run: p99 1.0 ms, max 2.0 ms (10 samples)", None),
            ("event loop lag over the run: p99 1.0 ms, max 2.0 ms (10 samples)", None),
        ]
    async with await StoreReader.open_readonly(path) as reader:
        events = await reader.events(await reader.run("r1"))
        assert _summary(events) == EXPECTED_R1  # read as the old store read
        (resumed,) = [e for e in events if isinstance(e, RunResumed)]
        assert resumed.down_seconds == 50.0
        assert await reader.down_seconds("r1") == 50.0
    # and the migrated store takes a run's events as a new one does
    store = await RunStore.open(path)
    try:
        store.handle(_started(300.0, 6))
        store.handle(SessionStarted(time=300.0, backend="local", base_model="tiny"))
        store.handle(
            RunResumed(
                time=301.0, run_id="r1", step=6, checkpoint="step-000006", down_seconds=136.0
            )
        )
        store.handle(RunFinished(time=302.0, status="completed", final_step=6))
        await store.flush()
        assert await store.down_seconds("r1") == 186.0
    finally:
        await store.close()


# ---------------------------------------------------------------- no reader parses text

#: Modules that read the store or events: none may find an event in a message's text.
READERS = [
    ROOT / "tinker_tui/engine/store/reader.py",
    ROOT / "tinker_tui/engine/store/codec.py",
    ROOT / "tinker_tui/engine/store/records.py",
    ROOT / "tinker_tui/engine/store/writer.py",
    *sorted((ROOT / "tinker_tui/app").rglob("*.py")),
]
#: String methods that read text for what it says.
_TEXT_TESTS = {
    "startswith",
    "endswith",
    "partition",
    "rpartition",
    "removeprefix",
    "split",
    "find",
    "index",
    "count",
}
#: `re` functions (and compiled patterns' methods) that read text.
_REGEX_READS = {"match", "search", "fullmatch", "findall", "finditer"}


def _is_message(node: ast.AST) -> bool:
    """`x.message`, or a name `message` / `msg`."""
    return (isinstance(node, ast.Attribute) and node.attr == "message") or (
        isinstance(node, ast.Name) and node.id in ("message", "msg")
    )


def _layout(node: ast.AST | None) -> bool:
    """A whitespace constant ("\n"): cutting a message into lines to show is layout, not
    reading what it says."""
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isspace()


def text_matching(source: str, *, sql: bool) -> list[str]:
    """Where `source` reads a message's text: a string test or a regex on a message, a
    substring tested `in` one; with `sql`, a LIKE in a query or an `re` import."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if (
                name in _TEXT_TESTS
                and _is_message(node.func.value)
                and not (node.args and _layout(node.args[0]))
            ):
                found.append(f"line {node.lineno}: .{name}( on a message")
            if name in _REGEX_READS and any(_is_message(a) for a in node.args):
                found.append(f"line {node.lineno}: regex .{name}( on a message")
        elif (
            isinstance(node, ast.Compare)
            and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
            and any(_is_message(c) for c in node.comparators)
            and not _layout(node.left)
        ):
            found.append(f"line {node.lineno}: `in` a message")
        elif (
            sql
            and isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and " LIKE " in node.value
        ):
            found.append(f"line {node.lineno}: LIKE in SQL")
        elif (
            sql
            and isinstance(node, ast.Import | ast.ImportFrom)
            and any(alias.name == "re" for alias in node.names)
            or (sql and isinstance(node, ast.ImportFrom) and node.module == "re")
        ):
            found.append(f"line {node.lineno}: imports re")
    return found


def test_the_checker_finds_each_way_of_reading_a_message():
    src = """
import re
def f(event, message):
    event.message.startswith("W&B: ")
    re.match(r"resuming (\\d+)", event.message)
    "resuming" in message
    PATTERN.search(event.message)
    q = "SELECT time FROM log WHERE message LIKE ?"
"""
    assert len(text_matching(src, sql=True)) == 6
    assert len(text_matching(src, sql=False)) == 4
    assert text_matching("def f(e):\n    return e.level in ('warning', 'error')\n", sql=True) == []
    assert (
        text_matching(
            'def f(e):\n    return "\\n" in e.message, e.message.split("\\n")\n', sql=True
        )
        == []
    )


def test_no_reader_of_the_store_or_the_app_parses_message_text():
    found = {}
    for path in READERS:
        hits = text_matching(
            path.read_text(encoding="utf-8"), sql="engine/store" in path.as_posix()
        )
        if hits:
            found[path.relative_to(ROOT).as_posix()] = hits
    assert found == {}
