"""The runs of the store a dashboard reads (`R`), as `tinker-tui runs` lists them: mark
some with `space` (the dashboard's own run is marked, "● this run", and the cursor starts
on another) and `c` (or `enter`) compares them;
`n` names the highlighted run; esc closes the list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Label

from tinker_tui.app.widgets.footer import KeyFooter

SHOWN = ("RUN", "NAME", "STATUS", "STEP", "REWARD", "STARTED", "DURATION")


class RunListScreen(Screen[None]):
    """The store's runs, newest first (see the module docstring)."""

    #: The dashboard's run keys (pause, stop, ...) do not apply here.
    OWN_KEYS = True

    BINDINGS = [
        Binding("escape,q", "close", "Close", id="runs_close"),
        Binding("space", "mark", "Mark", id="runs_mark"),
        Binding("c", "compare", "Compare marked", id="runs_compare"),
        Binding("n", "rename", "Name", id="runs_rename"),
    ]

    def __init__(self, db_path: Path, current: str = "") -> None:
        super().__init__(id="run-list")
        self.db_path = db_path
        self.rows: list[dict[str, Any]] = []
        self.marked: set[str] = {current} if current else set()
        #: The dashboard's own run: marked from the start, and said so in its row, so the
        #: mark is not read as the cursor.
        self.current = current

    def compose(self) -> ComposeResult:
        yield Label(f"Runs in {self.db_path}", id="compare-title")
        yield DataTable(id="sweep-table", cursor_type="row")
        yield KeyFooter(compact=True)

    async def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.border_title = "Runs · space: mark · c: compare the marked runs"
        table.add_columns("", *SHOWN)
        await self.reload()
        # the cursor starts on another run: the first `space` marks a second one to compare
        others = [i for i, row in enumerate(self.rows) if row["RUN"] != self.current]
        if others and self.current:
            table.move_cursor(row=others[0])

    async def reload(self) -> None:
        from tinker_tui.app.commands.runs import read_table

        self.rows = await read_table(self.db_path)
        table = self.query_one(DataTable)
        cursor = table.cursor_row
        table.clear()
        for row in self.rows:
            mark = "●" if row["RUN"] in self.marked else " "
            if row["RUN"] == self.current:
                mark += " this run"
            table.add_row(mark, *(str(row[c]) for c in SHOWN), key=row["RUN"])
        if self.rows:
            table.move_cursor(row=min(cursor, len(self.rows) - 1))

    def highlighted(self) -> str | None:
        if not self.rows:
            return None
        return str(self.rows[min(self.query_one(DataTable).cursor_row, len(self.rows) - 1)]["RUN"])

    async def action_mark(self) -> None:
        run_id = self.highlighted()
        if run_id is not None:
            self.marked ^= {run_id}
            await self.reload()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.run_worker(self.action_compare())

    async def action_compare(self) -> None:
        from tinker_tui.app.compare import open_comparison, resolve_runs
        from tinker_tui.app.screens.compare import CompareScreen

        ids = [str(r["RUN"]) for r in self.rows if r["RUN"] in self.marked]
        try:
            pairs = await resolve_runs([self.db_path], ids)
        except Exception as exc:  # fewer than two, too many
            self.notify(str(exc), severity="warning", timeout=3)
            return
        self.app.push_screen(CompareScreen(open_comparison(pairs)))

    def action_rename(self) -> None:
        run_id = self.highlighted()
        if run_id is None:
            return
        from tinker_tui.app.screens.run_label import edit_run_label

        row = next(r for r in self.rows if r["RUN"] == run_id)
        name = "" if row["NAME"] == "-" else str(row["NAME"])

        def done(new_name: str, new_note: str) -> None:
            self.run_worker(self.reload())

        edit_run_label(self.app, self.db_path, run_id, name, None, done=done)

    def action_close(self) -> None:
        self.dismiss(None)
