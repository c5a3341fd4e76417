"""The sweep's dashboard: a row per run (its settings, status, step, reward sparkline,
final reward, ETA), read from the store; the sweep itself runs in a scheduler process of
its own (`tinker-tui sweep --resume SWEEP --no-ui`, started here unless one runs), so
leaving the dashboard leaves the sweep going.

Keys: `enter` opens the highlighted run's dashboard (`attach` while it runs, else `show`;
its `q` comes back here), `space` marks runs and `c` compares the marked ones (all, when
none is marked), `p` pauses (or resumes) every running run, `q` stops the sweep or
detaches.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Label

from tinker_tui.app.compare import ComparedRun, drive, open_comparison
from tinker_tui.app.sweep import settings_text, sweep_log_path
from tinker_tui.app.view_maths import format_elapsed, text_sparkline
from tinker_tui.app.widgets.footer import KeyFooter
from tinker_tui.engine.store import StoredRun, StoreReader
from tinker_tui.engine.store.records import StoredSweep

COLUMNS = ("", "#", "RUN", "STATUS", "STEP", "REWARD", "FINAL", "ETA")


def start_scheduler(db_path: Path, sweep_id: str, parallel: int) -> subprocess.Popen[bytes]:
    """The sweep's scheduler as a process of its own session (the terminal's signals do
    not reach it), its output appended to SWEEP.sweep.log beside the store."""
    log = sweep_log_path(db_path, sweep_id)
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tinker_tui.app.cli",
                "sweep",
                "--resume",
                sweep_id,
                "--no-ui",
                "--db",
                str(db_path),
                "--parallel",
                str(parallel),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            close_fds=True,
        )


def scheduler_pid(db_path: Path, sweep_id: str) -> int | None:
    """The pid of the process that runs the sweep (its lock file holds it)."""
    from tinker_tui.engine.training.resume import lock_path, run_is_live

    if not run_is_live(db_path, sweep_id):
        return None
    try:
        return int(lock_path(db_path, sweep_id).read_text().strip())
    except (OSError, ValueError):
        return None


#: A sweep run's stored statuses once it ran to an end.
ENDED = ("completed", "failed", "stopped", "interrupted")


def best_row(rows: list[list[Any]]) -> int | None:
    """The row with the highest final reward (column 6), if any has one."""
    finals = [
        (float(row[6]), i)
        for i, row in enumerate(rows)
        if str(row[6]).replace(".", "", 1).replace("-", "", 1).isdigit()
    ]
    return max(finals)[1] if finals else None


class SweepScreen(Screen[None]):
    """The runs of one sweep (see the module docstring)."""

    BINDINGS = [
        Binding("enter", "open_run", "Open run", id="sweep_open"),
        Binding("space", "mark", "Mark", id="sweep_mark"),
        Binding("c", "compare", "Compare", id="sweep_compare"),
        Binding("p", "pause_all", "Pause all", id="sweep_pause"),
        Binding("q", "quit_sweep", "Quit", id="sweep_quit"),
    ]
    REFRESH = 1.0

    def __init__(self, db_path: Path, sweep_id: str, *, clock: Any = time.time) -> None:
        super().__init__(id="sweep")
        self.db_path = db_path
        self.sweep_id = sweep_id
        self.clock = clock
        self.sweep: StoredSweep | None = None
        self.stored: dict[str, StoredRun] = {}
        self.compared: dict[str, ComparedRun] = {}
        self.marked: set[str] = set()
        self.stopping = False
        self.paused = False
        self._rows: list[list[Any]] | None = None

    def compose(self) -> ComposeResult:
        yield Label("Sweep", id="compare-title")
        yield DataTable(id="sweep-table", cursor_type="row")
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        table = self.query_one("#sweep-table", DataTable)
        table.border_title = "Runs"
        table.add_columns(*COLUMNS)
        self.set_interval(self.REFRESH, self.reload)
        self.call_after_refresh(self.reload)

    async def reload(self) -> None:
        """Read the sweep and its runs' rows again; follow each run that has started."""
        try:
            async with await StoreReader.open_readonly(self.db_path) as store:
                self.sweep = await store.find_sweep(self.sweep_id)
                self.stored = {r.run_id: r for r in await store.runs()}
        except Exception as exc:  # a store another process is writing: try again
            self.notify(f"reading the store: {exc}", severity="warning", timeout=2)
            return
        for run in self.sweep.runs:
            row = self.stored.get(run.run_id)
            if row is not None and run.run_id not in self.compared:
                [compared] = open_comparison([(self.db_path, row)])
                self.compared[run.run_id] = compared
                self.run_worker(drive(compared), group="sweep-runs", exit_on_error=False)
        self.redraw()
        if self.stopping and scheduler_pid(self.db_path, self.sweep_id) is None:
            self.app.exit(0)

    def row_texts(self) -> list[list[Any]]:
        from tinker_tui.app.compare import status_of

        assert self.sweep is not None
        rows = []
        # one scale for every row's sparkline, so their heights compare across runs
        shown = [
            v
            for c in self.compared.values()
            for v in [v for _, v in c.state.rewards if math.isfinite(v)][-16:]
        ]
        scale = (min(shown), max(shown)) if shown else None
        for run in self.sweep.runs:
            compared = self.compared.get(run.run_id)
            status, step, spark, final, eta = run.status, "-", "", "-", ""
            if compared is not None:
                state = compared.state
                if (
                    run.status not in ("completed", "failed", "stopped", "interrupted")
                    or state.status is not None
                ):
                    status = status_of(compared)  # with why it ended, once it has
                step = f"{state.step}/{state.max_steps or '?'}"
                rewards = [v for _, v in state.rewards]
                spark = text_sparkline(rewards, 16, scale)
                final = f"{rewards[-1]:.3f}" if rewards else "-"
                left = state.eta() if status in ("running", "starting") else None
                eta = format_elapsed(left) if left is not None else ""
            mark = "●" if run.run_id in self.marked else ""
            rows.append(
                [
                    mark,
                    str(run.idx + 1),
                    settings_text(run),
                    status,
                    step,
                    Text(spark, style="green"),
                    final,
                    eta,
                ]
            )
        return rows

    def redraw(self) -> None:
        if self.sweep is None:
            return
        sweep = self.sweep
        rows = self.row_texts()
        done = sum(1 for r in sweep.runs if r.status == "completed")
        running = sum(1 for r in rows if r[3] in ("running", "paused", "starting"))
        failed = [r for r in sweep.runs if r.status == "failed"]
        state = (
            "stopping"
            if self.stopping
            else ("running" if scheduler_pid(self.db_path, self.sweep_id) else "not running")
        )
        if state == "not running" and all(r.status in ENDED for r in sweep.runs):
            best = best_row(rows)
            state = "finished"
            if best is not None:  # marked in its row too
                rows[best][6] = f"{rows[best][6]} ★ best"
                state += f" · best: #{rows[best][1]} ({rows[best][2]})"
        # Counts of none left out; the title wraps (to three lines) rather than cut.
        parts = [
            f"Sweep {sweep.sweep_id}",
            sweep.task,
            f"{done}/{len(sweep.runs)} completed",
            *([f"{running} running"] if running else []),
            *([f"{len(failed)} failed"] if failed else []),
            f"{sweep.parallel} at a time",
            state,
        ]
        self.query_one("#compare-title", Label).update(" · ".join(parts))
        if rows == self._rows:
            return
        table = self.query_one("#sweep-table", DataTable)
        cursor = table.cursor_row
        table.clear()
        for run, row in zip(sweep.runs, rows, strict=True):
            table.add_row(*row, key=run.run_id)
        table.move_cursor(row=min(cursor, len(rows) - 1))
        self._rows = rows

    def highlighted(self) -> str | None:
        if self.sweep is None or not self.sweep.runs:
            return None
        table = self.query_one("#sweep-table", DataTable)
        return self.sweep.runs[min(table.cursor_row, len(self.sweep.runs) - 1)].run_id

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """`enter` on a row (the table takes the key itself)."""
        event.stop()
        self.action_open_run()

    def action_mark(self) -> None:
        run_id = self.highlighted()
        if run_id is not None:
            self.marked ^= {run_id}
            self.redraw()

    def action_open_run(self) -> None:
        from tinker_tui.engine.training.resume import run_is_live

        run_id = self.highlighted()
        if run_id is None or run_id not in self.stored:
            self.notify("this run has not started yet", severity="warning", timeout=2)
            return
        command = "attach" if run_is_live(self.db_path, run_id) else "show"
        with self.app.suspend():  # the run's own dashboard, in this terminal; q comes back
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tinker_tui.app.cli",
                    command,
                    run_id,
                    "--db",
                    str(self.db_path),
                ],
                check=False,
            )

    def action_compare(self) -> None:
        from tinker_tui.app.screens.compare import CompareScreen

        ids = [i for i in self.marked if i in self.stored] or list(self.stored)
        ids = [r.run_id for r in (self.sweep.runs if self.sweep else ()) if r.run_id in ids]
        if len(ids) < 2:
            self.notify("compare needs two runs that have started", severity="warning")
            return
        self.app.push_screen(
            CompareScreen(open_comparison([(self.db_path, self.stored[i]) for i in ids[:8]]))
        )

    def action_pause_all(self) -> None:
        self.paused = not self.paused
        word = "pause" if self.paused else "resume"
        self.run_worker(lambda: self._control_all(word), thread=True, exit_on_error=False)
        self.notify(f"{word} sent to every running run", timeout=2)

    def _control_all(self, word: str) -> None:
        from tinker_tui.engine.control.endpoint import (
            ControlClient,
            RemoteControl,
            control_file_path,
        )
        from tinker_tui.engine.training.resume import run_is_live

        for run_id in list(self.stored):
            path = control_file_path(self.db_path, run_id)
            if not run_is_live(self.db_path, run_id) or not path.is_file():
                continue
            try:
                control = RemoteControl(ControlClient.from_file(path))
                control.pause() if word == "pause" else control.resume()
            except Exception as exc:  # a run ending meanwhile
                self.app.call_from_thread(
                    self.notify, f"{run_id}: {exc}", severity="warning", timeout=3
                )

    def action_quit_sweep(self) -> None:
        from tinker_tui.app.screens.confirm_quit import DETACH, STOP, QuitScreen

        if scheduler_pid(self.db_path, self.sweep_id) is None:  # over: nothing to stop
            self.app.exit(0)
            return

        def chosen(choice: str | None) -> None:
            if choice == DETACH:
                if isinstance(self.app, SweepApp):
                    self.app.detached = True
                self.app.exit(0)
            elif choice == STOP:
                pid = scheduler_pid(self.db_path, self.sweep_id)
                if pid is None:
                    self.app.exit(0)
                    return
                os.kill(pid, signal.SIGTERM)
                self.stopping = True
                self.notify("stopping: each run finishes its step and checkpoints", timeout=4)

        self.app.push_screen(QuitScreen("stop_sweep"), chosen)


class SweepApp(App[None]):
    """The sweep's dashboard as an app (`tinker-tui sweep` with a terminal)."""

    CSS_PATH = "../tinker_tui.tcss"
    TITLE = "tinker-tui sweep"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-cramped"), (24, "-short"), (36, "-tall")]
    BINDINGS = [Binding("ctrl+c", "quit", "Quit", show=False, priority=True)]

    def __init__(self, db_path: Path, sweep_id: str, *, clock: Any = time.time) -> None:
        super().__init__()
        self.db_path, self.sweep_id, self.clock = db_path, sweep_id, clock
        self.detached = False

    def on_mount(self) -> None:
        self.push_screen(SweepScreen(self.db_path, self.sweep_id, clock=self.clock))


def watch_sweep(db_path: Path, sweep_id: str, parallel: int) -> int:
    """Start the sweep's scheduler unless one runs, then its dashboard until the user
    leaves; the summary (or how to come back) on the terminal."""
    import asyncio

    from tinker_tui.app.run_summary import db_flag
    from tinker_tui.app.sweep import summary_lines

    if scheduler_pid(db_path, sweep_id) is None:
        start_scheduler(db_path, sweep_id, parallel)
    app = SweepApp(db_path, sweep_id)
    app.run()
    if app.detached:
        print(
            f"detached from sweep {sweep_id}: it goes on in its own process (its output: "
            f"{sweep_log_path(db_path, sweep_id)})\n  watch again: tinker-tui sweep "
            f"--resume {sweep_id}{db_flag(db_path)}"
        )
        return 0
    print("\n".join(asyncio.run(summary_lines(db_path, sweep_id))))
    return 0
