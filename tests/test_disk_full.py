"""A disk that fills up under a run: the run fails (exit 1) with one line that says the disk
is full and names the file it could not write, and once there is room `--resume` continues
it exactly once. Where the system allows it, a real full disk: a 4 MiB tmpfs in a private
mount namespace (tests/private_mount.py) holding the store and its checkpoints, grown to
64 MiB before the resume, as a user would make room. Elsewhere a patched checkpoint writer
that fails as a full disk does (OSError ENOSPC).

A second test fills the store itself (SQLite's page limit: "database or disk is full"): the
writer keeps the events it had, stops writing, tells the run, and `flush` raises.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import sys
from pathlib import Path

import private_mount
import pytest
from exactly_once import check_exactly_once, integrity

from tinker_tui.app.cli import main
from tinker_tui.engine.errors import DiskFull
from tinker_tui.engine.events import LogEmitted, RunStarted
from tinker_tui.engine.store import RunStore

STEPS = 6
# No sampler weights on disk: the full state checkpoints (about 2 MiB each) fill the disk,
# at step 2 or 4, whichever the store's growth leaves no room for.
ARGS = [
    "--steps",
    str(STEPS),
    "--checkpoint-every",
    "2",
    "--warmup-steps",
    "0",
    "--sampler-checkpoint-every",
    "0",
]


def assert_says_disk_full(line: str, folder: Path) -> None:
    assert line.startswith("tinker-tui: run failed: DiskFull: no space left on device writing "), (
        line
    )
    assert str(folder) in line, line


def test_a_full_disk_names_itself_and_the_run_resumes_after(tmp_path, capsys):
    if not private_mount.available():
        pytest.skip("no private mount namespace here: a patched writer instead")
    disk, copy = tmp_path / "disk", tmp_path / "copy"
    disk.mkdir()
    command = f"{sys.executable} -m tinker_tui.app.cli run example --no-ui --db {disk}/runs.db"
    script = (
        f"mount -t tmpfs -o size=4m tmpfs {disk} || exit 99\n"
        f"{command} {' '.join(ARGS)} > {tmp_path}/first.out 2> {tmp_path}/first.err\n"
        f"echo $? > {tmp_path}/first.rc\n"
        f"mount -o remount,size=64m {disk}\n"  # the user makes room
        f"{command} --resume > {tmp_path}/second.out 2> {tmp_path}/second.err\n"
        f"echo $? > {tmp_path}/second.rc\n"
        f"cp -a {disk} {copy}\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "CI")}
    proc = private_mount.run(script, env=env)
    assert proc.returncode == 0, proc.stderr
    first_err = (tmp_path / "first.err").read_text()
    assert (tmp_path / "first.rc").read_text().strip() == "1", first_err
    assert "Traceback" not in first_err
    assert_says_disk_full(first_err.splitlines()[-1], disk)
    second_err = (tmp_path / "second.err").read_text()
    assert (tmp_path / "second.rc").read_text().strip() == "0", second_err
    assert f"completed at step {STEPS}/" in (tmp_path / "second.out").read_text()
    db = copy / "runs.db"
    assert integrity(db) == "ok"
    check_exactly_once(db, STEPS)


def test_a_checkpoint_writer_that_finds_the_disk_full(tmp_path, capsys, monkeypatch):
    """The same where no tmpfs can be mounted: the writer fails as on a full disk."""
    if private_mount.available():
        pytest.skip("a real full disk is tested here (test_a_full_disk_names_itself_...)")
    from tinker_tui.engine.local import checkpoints

    write = checkpoints._torch_save

    def full_at_step_4(state, path):
        if ".step-000004." in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        write(state, path)

    db = tmp_path / "runs.db"
    monkeypatch.setattr(checkpoints, "_torch_save", full_at_step_4)
    assert main(["run", "example", "--no-ui", "--db", str(db), *ARGS]) == 1
    err = capsys.readouterr().err
    assert_says_disk_full(err.splitlines()[-1], tmp_path / "checkpoints")
    assert "step-000004" in err
    assert not [p for p in (tmp_path / "checkpoints").rglob("*step-000004*")], (
        "a half-written checkpoint was left"
    )
    monkeypatch.setattr(checkpoints, "_torch_save", write)
    assert main(["run", "example", "--no-ui", "--db", str(db), "--resume"]) == 0
    assert f"completed at step {STEPS}/" in capsys.readouterr().out
    check_exactly_once(db, STEPS)


async def test_a_full_store_keeps_what_it_had_and_stops_the_run(tmp_path):
    db = tmp_path / "runs.db"
    store = await RunStore.open(db)
    failures: list[DiskFull] = []
    store.on_failure = failures.append
    store.handle(
        RunStarted(
            time=1.0,
            run_id="r1",
            name="t",
            backend="local",
            base_model="m",
            max_steps=1,
            start_step=0,
            config={},
        )
    )
    await store.flush()
    conn = store._require_conn()
    (pages,) = await (await conn.execute("PRAGMA page_count")).fetchone()
    await conn.execute(f"PRAGMA max_page_count = {pages + 2}")  # the disk is nearly full
    for i in range(2000):
        store.handle(LogEmitted(time=2.0 + i, level="info", message="x" * 500))
    with pytest.raises(DiskFull, match="no space left on device writing run store") as caught:
        await store.flush()
    assert str(db) in str(caught.value)
    assert failures == [caught.value], "the run is told once"
    await conn.execute("PRAGMA max_page_count = 1000000")  # room again: still no more writes,
    store.handle(LogEmitted(time=9999.0, level="info", message="after"))  # so the record
    with pytest.raises(DiskFull):  # stays a prefix of the run's events
        await store.flush()
    await store.close()
    with sqlite3.connect(db) as check:
        assert check.execute("select count(*) from runs").fetchone()[0] == 1
        assert check.execute("select count(*) from log where message = 'after'").fetchone()[0] == 0
    check.close()
