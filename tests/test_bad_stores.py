"""A store `run` cannot use is refused at once: exit 2, one line on stderr and nothing before
it, and the file and its folder left exactly as they were (no -wal or -shm beside a damaged
store, no lock, control or metrics file, no checkpoints folder). A folder, a file that is
not SQLite, another application's database, a store of a newer schema, a damaged store, a
store another writer keeps locked, a read-only store; `--resume` is refused the same way.
How fast: bench/bench_bad_store.py.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import private_mount
import pytest

from tinker_tui.app.cli import main
from tinker_tui.engine.events import LogEmitted, RunStarted
from tinker_tui.engine.store import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, RunStore
from tinker_tui.engine.store.schema import StoreError, check_file

RUN = ["run", "example", "--no-ui", "--steps", "2", "--warmup-steps", "0"]


def listing(folder: Path) -> dict[str, bytes | None]:
    """Every file under `folder` with its bytes (None for a folder)."""
    return {
        str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
    }


def refused(db: Path, capsys, *extra: str) -> str:
    """Runs `run` (and `run --resume`) on `db`; both must refuse it as the module says.
    Returns the line."""
    before = listing(db.parent)
    lines = []
    for resume in ((), ("--resume",)):
        assert main([*RUN, "--db", str(db), *extra, *resume]) == 2
        out, err = capsys.readouterr()
        assert out == "", "printed before the refusal"
        assert len(err.splitlines()) == 1 and err.startswith("tinker-tui: error: "), err
        assert str(db) in err
        assert listing(db.parent) == before, "the store or its folder was changed"
        lines.append(err.strip())
    assert lines[0] == lines[1]
    return lines[0]


def make_store(path: Path, *, rows: int = 10, wal: bool = True) -> None:
    """A tinker-tui store with one run and `rows` log lines, closed (no -wal, no -shm)."""

    async def go():
        store = await RunStore.open(path)
        store.handle(
            RunStarted(
                time=1.0,
                run_id="r1",
                name="yes_no_maybe",
                backend="local",
                base_model="tiny",
                max_steps=2,
                start_step=0,
                config={},
            )
        )
        for i in range(rows):
            store.handle(LogEmitted(time=2.0 + i, level="info", message="x" * 200))
        await store.close()

    asyncio.run(go())
    if not wal:
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA journal_mode=DELETE")
        conn.close()
    assert not [p for p in path.parent.iterdir() if p.name.endswith(("-wal", "-shm"))]


def damage(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2 // 4096 * 4096
    data[middle : middle + 4096] = b"\xff" * 4096
    path.write_bytes(bytes(data))


def test_a_file_that_is_not_a_sqlite_database(tmp_path, capsys):
    db = tmp_path / "garbage.db"
    db.write_bytes(b"not a database at all\n" * 500)
    assert "is not a SQLite database" in refused(db, capsys)


def test_a_folder(tmp_path, capsys):
    db = tmp_path / "runs.db"
    db.mkdir()
    (db / "inside").write_text("kept")
    assert "is a folder" in refused(db, capsys)


def test_another_applications_database(tmp_path, capsys):
    db = tmp_path / "theirs.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('kept')")
    conn.close()
    assert "not a tinker-tui run store" in refused(db, capsys)


def test_a_store_of_a_newer_schema(tmp_path, capsys):
    db = tmp_path / "runs.db"
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
        conn.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY, name TEXT, started_at REAL)")
    conn.close()
    assert "newer than this tinker-tui supports" in refused(db, capsys)


@pytest.mark.parametrize("wal", [True, False], ids=["wal", "rollback-journal"])
def test_a_damaged_store(tmp_path, capsys, wal):
    db = tmp_path / "runs.db"
    make_store(db, rows=3000, wal=wal)
    damage(db)
    assert "is damaged" in refused(db, capsys)


@pytest.mark.parametrize(
    "command", [["runs"], ["show", "--no-ui"], ["show", "--no-ui", "--log"], ["export"]]
)
def test_a_store_damaged_past_its_header_is_one_line_for_the_read_commands(
    tmp_path, capsys, monkeypatch, command
):
    """The read commands open without the whole-file check `run` makes; SQLite finds the
    damage on the pages a query reads. That was "run failed: DatabaseError", exit 1."""
    db = tmp_path / "runs.db"
    make_store(db, rows=3000)
    data = bytearray(db.read_bytes())
    data[4096:40960] = b"\x13" * (40960 - 4096)  # the pages after the header's
    db.write_bytes(bytes(data))
    monkeypatch.chdir(tmp_path)  # where export writes
    assert main([*command, "--db", str(db)]) == 2
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and err.startswith("tinker-tui: error: "), err
    assert str(db) in err and "damaged" in err


def test_a_store_another_writer_keeps_locked(tmp_path, capsys):
    db = tmp_path / "runs.db"
    assert main(["runs", "--db", str(db)]) == 2  # no store yet
    capsys.readouterr()
    make_store(db)
    other = sqlite3.connect(db, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
        other.execute(
            "INSERT INTO log (run_id, time, level, message) VALUES ('theirs', 0, 'info', 'kept')"
        )
        assert "locked by another writer" in refused(db, capsys)
        other.execute("COMMIT")
    finally:
        other.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("select message from log where run_id = 'theirs'").fetchall() == [
            ("kept",)
        ]
        assert conn.execute("select count(*) from runs").fetchone()[0] == 1
    conn.close()


def test_a_read_only_store(tmp_path, capsys):
    """Read-only by its mode bits where this process obeys them (not root); else on a
    read-only mount in a private namespace (root ignores mode bits)."""
    db = tmp_path / "runs.db"
    make_store(db)
    db.chmod(0o444)
    if os.access(db, os.W_OK):  # root
        db.chmod(0o644)
        if not private_mount.available():
            pytest.skip("running as root, and no private mount namespace for a read-only disk")
        script = (
            f'D=$(mktemp -d) && mount -t tmpfs -o size=4m tmpfs "$D" && cp {db} "$D/runs.db" '
            '&& mount -o remount,ro "$D" && cd "$D" && '
            f'{sys.executable} -m tinker_tui.app.cli {" ".join(RUN)} --db "$D/runs.db"; '
            'echo "rc=$?"; ls -A "$D"'
        )
        proc = private_mount.run(script)
        assert proc.stdout.split() == ["rc=2", "runs.db"], (proc.stdout, proc.stderr)
        (line,) = proc.stderr.splitlines()
        assert "cannot open run store" in line and "for writing" in line, line
        return
    try:
        assert "for writing" in refused(db, capsys)
    finally:
        db.chmod(0o644)


def test_refused_before_the_engine_starts_in_its_own_process(tmp_path):
    """The same from outside: the process prints one line and nothing else."""
    db = tmp_path / "runs.db"
    make_store(db, rows=3000)
    damage(db)
    before = listing(tmp_path)
    env = dict(os.environ)
    env.pop("TINKER_API_KEY", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tinker_tui.app.cli", *RUN, "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert len(proc.stderr.splitlines()) == 1 and "is damaged" in proc.stderr
    assert listing(tmp_path) == before
    assert "torch" not in proc.stderr


# ---------------------------------------------------------------------- check_file alone


def test_check_file_passes_what_becomes_or_is_a_store_and_creates_nothing(tmp_path):
    check_file(tmp_path / "new" / "deeper" / "runs.db")  # created on open
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "empty.db").touch()
    check_file(tmp_path / "empty.db")
    db = tmp_path / "runs.db"
    make_store(db)
    before = listing(tmp_path)
    check_file(db)
    assert listing(tmp_path) == before, "an idle WAL store got -wal or -shm files"
    with pytest.raises(StoreError, match="is not a folder"):
        check_file(tmp_path / "empty.db" / "runs.db")


def test_check_file_and_open_refuse_for_the_same_reasons(tmp_path):
    """One home for each rule: `RunStore.open` says what `check_file` says."""
    db = tmp_path / "runs.db"
    with sqlite3.connect(db) as conn:
        for script in MIGRATIONS:
            conn.executescript(script)
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError) as early:
        check_file(db)

    async def open_it():
        await RunStore.open(db)

    with pytest.raises(StoreError) as late:
        asyncio.run(open_it())
    assert str(early.value) == str(late.value)
