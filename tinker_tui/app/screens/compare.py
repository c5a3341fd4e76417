"""The comparison of several runs: the metrics view with a line per run in every chart
(the same picker `m`, smoothing `s`, chart keys `x` `l` `z` `r`), under a table that is
its legend: each run's colour and name, status, steps, final and best reward, duration,
and every setting that differs between the runs.

It reads its runs itself (`app.compare`: a session per run, driven by the screen's
workers; a live run is followed), so it is the same pushed over a run's dashboard (its
run list, `R`), over a sweep, or as the whole of `tinker-tui compare`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Label

from tinker_tui.app.compare import ComparedRun, comparison_rows, drive
from tinker_tui.app.dashboard_state import DashboardState, metric_order
from tinker_tui.app.screens.metrics import MetricsScreen, chart_id
from tinker_tui.app.widgets.compare_chart import RUN_COLOURS

#: The theme colours of the runs, in order (`compare-chart--run-N` in the stylesheet).
RUN_COLOUR_VARIABLES = (
    "success",
    "warning",
    "accent",
    "error",
    "primary-lighten-2",
    "secondary-lighten-1",
    "foreground",
    "warning-darken-3",
)
assert len(RUN_COLOUR_VARIABLES) == RUN_COLOURS


class CompareScreen(MetricsScreen):
    """Charts and table of `runs` (see the module docstring); `q`/esc closes it."""

    #: The dashboard's run keys (pause, stop, ...) do not apply here.
    OWN_KEYS = True

    BINDINGS = [
        Binding("q,escape", "close", "Close", id="compare_close"),
        Binding("s", "cycle_smoothing", "Smooth", id="compare_smoothing"),
    ]

    #: Seconds between redraws (the runs' sessions poll the store on their own).
    REFRESH = 0.5

    def __init__(self, runs: Sequence[ComparedRun], *, clock: Any = time.time) -> None:
        super().__init__(id="compare")
        self.runs = list(runs)
        self.clock = clock
        self._table_rows: list[list[str]] | None = None
        self._columns: list[str] = []

    @property
    def states(self) -> list[DashboardState]:
        return [run.state for run in self.runs]

    def compose(self) -> ComposeResult:
        yield Label(f"Comparing {len(self.runs)} runs", id="compare-title")
        yield DataTable(id="compare-table", cursor_type="row", zebra_stripes=False)
        yield from self.compose_charts()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#compare-table").border_title = "Runs"
        for run in self.runs:
            self.run_worker(drive(run), group="compare-runs", exit_on_error=False)
        self.set_interval(self.REFRESH, self.refresh_compare)
        self.call_after_refresh(self.refresh_compare)

    def make_chart(self, key: str) -> Any:
        from tinker_tui.app.widgets.compare_chart import CompareChart

        chart = CompareChart(key, id=chart_id(key), classes="metric-chart")
        chart.states = self.states
        return chart

    def update_from_state(self, state: DashboardState, now: float) -> None:
        """The dashboard's timer: this view redraws on its own (`refresh_compare`)."""

    def charts_changed(self) -> None:
        self._set_subtitle()
        self.refresh_compare()

    def refresh_compare(self) -> None:
        if not self.is_mounted:
            return
        now = self.clock()
        self._refresh_table(now)
        keys: list[str] = []
        for state in self.states:
            keys += [k for k in state.metric_keys() if k not in keys]
        keys.sort(key=metric_order)
        if keys != self._keys:
            self._keys = keys
            self._sync_picker(keys)
        self._sync_charts()
        for chart in self.charts():
            if chart.is_mounted:
                chart.update_from_state(self.states[0], now)

    def _refresh_table(self, now: float) -> None:
        columns, rows = comparison_rows(self.runs, now)
        title = self.query_one("#compare-title", Label)
        live = sum(1 for r in rows if r[1] in ("running", "paused", "starting"))
        title.update(
            f"Comparing {len(rows)} runs"
            + (f" · {live} live" if live else "")
            + f" · {self.chart_options.describe()}"
        )
        if rows == self._table_rows and columns == self._columns:
            return
        table = self.query_one("#compare-table", DataTable)
        colours = self.app.get_css_variables()
        cursor = table.cursor_row
        if columns != self._columns:
            table.clear(columns=True)
            table.add_columns("", *columns)
            self._columns = columns
        else:
            table.clear()
        for index, row in enumerate(rows):
            colour = colours.get(RUN_COLOUR_VARIABLES[index % RUN_COLOURS], "")
            table.add_row(Text("━━", style=colour), *row, key=str(index))
        self._table_rows = rows
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1))

    def action_cycle_smoothing(self) -> None:
        beta = 0.0
        for state in self.states:
            beta = state.cycle_smoothing()
        self.refresh_compare()
        self.notify(f"smoothing {beta:g}" if beta else "smoothing off", timeout=1.5)

    def action_close(self) -> None:
        self.dismiss(None)


class CompareApp(App[None]):
    """`tinker-tui compare`: the comparison as the whole app; closing it leaves."""

    CSS_PATH = "../tinker_tui.tcss"
    TITLE = "tinker-tui compare"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-cramped"), (24, "-short"), (36, "-tall")]
    BINDINGS = [Binding("ctrl+c", "quit", "Quit", show=False, priority=True)]

    def __init__(self, runs: Sequence[ComparedRun], *, clock: Any = time.time) -> None:
        super().__init__()
        self.runs = list(runs)
        self.clock = clock

    def on_mount(self) -> None:
        self.push_screen(CompareScreen(self.runs, clock=self.clock), lambda _: self.exit())
