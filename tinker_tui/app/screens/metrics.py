"""The metrics view: a grid of small charts, one per metric the run records per step.

Every numeric key of the engine's step and eval metrics gets a chart (reward, loss,
learning rate, the step's time split, throughput, discards, evaluation, and whatever the
task reports, `task/<name>` included), with the dashboard's smoothing (`s`) and its
checkpoint and knob markers. The picker (`m`) chooses which charts show; `x`, `l`, `z`
and `r` choose the x axis, a log scale and the steps shown. The view draws
from the run model only, so it is the same on a live run, `show` and `attach`.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, VerticalScroll
from textual.widgets import Label, SelectionList
from textual.widgets.selection_list import Selection

from tinker_tui.app.chart_options import ChartOptions
from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.screens.chart_keys import CHART_BINDINGS, ChartKeys
from tinker_tui.app.screens.run_view import RunView
from tinker_tui.app.widgets.footer import KeyFooter
from tinker_tui.app.widgets.status_bar import RunStatusPanel


def chart_id(key: str) -> str:
    """A widget id for a metric key (keys hold `/`, `:` and other characters ids cannot)."""
    return "metric-" + "".join(c if c.isalnum() else f"_{ord(c):x}_" for c in key)


class MetricsScreen(RunView, ChartKeys):
    """Charts of the run's metrics by step; `m` shows or hides the picker; the chart keys
    (`screens.chart_keys`) choose the x axis, a log scale and the steps shown."""

    AUTO_FOCUS = ""

    #: Charts mounted per redraw: a chart takes tens of milliseconds to build, so with
    #: dozens of metrics the first ones show at once and the rest follow, the view answering
    #: keys in between.
    MOUNT_BATCH = 6

    BINDINGS = [
        Binding("m", "toggle_picker", "Pick metrics", id="pick_metrics"),
        *CHART_BINDINGS,
    ]

    def __init__(self, *, id: str = "metrics") -> None:
        super().__init__(id=id)
        #: Metric keys the user turned off in the picker; every other key is charted.
        self.hidden: set[str] = set()
        self._keys: list[str] = []
        self._shown: list[str] = []
        self.chart_options = ChartOptions()

    def compose(self) -> ComposeResult:
        yield RunStatusPanel(id="status", mode=self.host.mode_label)
        yield from self.compose_charts()

    def compose_charts(self) -> ComposeResult:
        """The picker and the chart grid, then the keys (the comparison shows the same)."""
        with Horizontal(id="metrics-panes"):
            yield SelectionList[str](id="metric-picker")
            with VerticalScroll(id="metric-scroll"):
                yield Label(
                    "No step metrics yet: the charts appear with the first step.",
                    id="metrics-empty",
                )
                yield Grid(id="metric-grid")
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        picker = self.query_one("#metric-picker", SelectionList)
        picker.border_title = "Metrics"
        picker.border_subtitle = "space: show/hide"
        self.query_one("#metric-scroll").border_title = "Charts"
        picker.display = self.size.width >= 120 or self.app.size.width >= 120

    def action_toggle_picker(self) -> None:
        picker = self.query_one("#metric-picker", SelectionList)
        picker.display = not picker.display
        if picker.display:
            picker.focus()

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged) -> None:
        selected = set(event.selection_list.selected)
        self.hidden = {key for key in self._keys if key not in selected}
        self._sync_charts()

    def charts(self) -> list[Any]:
        """The charts shown (`StepChart`s, imported once the dashboard loaded them)."""
        return list(self.query_one("#metric-grid").query(".metric-chart"))

    def _sync_picker(self, keys: list[str]) -> None:
        picker = self.query_one("#metric-picker", SelectionList)
        highlighted = picker.highlighted
        with picker.prevent(SelectionList.SelectedChanged):
            picker.clear_options()
            picker.add_options([Selection(key, key, key not in self.hidden) for key in keys])
        if highlighted is not None and keys:
            picker.highlighted = min(highlighted, len(keys) - 1)

    @property
    def pending(self) -> bool:
        """Some charts the picker shows are not mounted yet (see `MOUNT_BATCH`)."""
        return self._shown != [key for key in self._keys if key not in self.hidden]

    def make_chart(self, key: str) -> Any:
        """A new chart of `key` (a `StepChart`)."""
        from tinker_tui.app.widgets.step_chart import StepChart

        return StepChart(key, id=chart_id(key), classes="metric-chart")

    def _sync_charts(self) -> None:
        shown = [key for key in self._keys if key not in self.hidden]
        if shown == self._shown:
            return
        grid = self.query_one("#metric-grid", Grid)
        existing = {chart.key: chart for chart in self.charts()}
        for key, chart in list(existing.items()):
            if key not in shown:
                chart.remove()
                del existing[key]
        # keep the charts in the keys' order: mount new ones before the next shown chart
        mounted = 0
        for index, key in enumerate(shown):
            if key in existing:
                continue
            if mounted == self.MOUNT_BATCH:
                break  # the next redraw mounts more
            later = [existing[k] for k in shown[index + 1 :] if k in existing]
            chart = self.make_chart(key)
            chart.options = self.chart_options
            if later:
                grid.mount(chart, before=later[0])
            else:
                grid.mount(chart)
            existing[key] = chart
            mounted += 1
        if all(key in existing for key in shown):
            self._shown = shown
        self.query_one("#metrics-empty").display = not shown
        self._set_subtitle()

    def _set_subtitle(self) -> None:
        shown = self._shown or [key for key in self._keys if key not in self.hidden]
        self.query_one("#metric-scroll").border_subtitle = (
            f"{len(shown)} of {len(self._keys)} metrics · {self.chart_options.describe()} · "
            "s smooth · m pick · x l z r"
        )

    def charts_changed(self) -> None:
        self._set_subtitle()
        self.host.refresh_panes()

    def update_from_state(self, state: DashboardState, now: float) -> None:
        self.query_one(RunStatusPanel).update_from_state(state, now)
        keys = state.metric_keys()
        if keys != self._keys:
            self._keys = keys
            self._sync_picker(keys)
        self._sync_charts()
        for chart in self.charts():
            if chart.is_mounted:
                chart.update_from_state(state, now)
