"""The dashboard: status line, throughput, stale/discarded, rewards, checkpoints, log."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.screens.run_view import RunView
from tinker_tui.app.widgets.chart_pane import ChartPane
from tinker_tui.app.widgets.checkpoints import CheckpointsTable
from tinker_tui.app.widgets.discarded import DiscardedPanel
from tinker_tui.app.widgets.footer import KeyFooter
from tinker_tui.app.widgets.log import LogPanel
from tinker_tui.app.widgets.status_bar import RunStatusPanel
from tinker_tui.app.widgets.throughput import ThroughputPanel


class DashboardScreen(RunView):
    """The run at a glance. The panes do not watch events themselves: the app calls
    `update_from_model` on a timer. `tab` moves between panes, `+` maximizes one."""

    AUTO_FOCUS = ""  # nothing focused: no cursor highlight, footer shows only app keys

    BINDINGS = [
        Binding("l", "cycle_log_level", "Log level", show=False, id="log_level"),
    ]

    def __init__(self) -> None:
        super().__init__(id="dashboard")

    def compose(self) -> ComposeResult:
        yield RunStatusPanel(id="status", mode=self.host.mode_label)
        with Grid(id="panes"):
            yield ThroughputPanel(id="throughput")
            yield DiscardedPanel(id="discarded")
            # the chart's module imports numpy: it loads after the first frame
            yield ChartPane("Reward", lambda charts: charts.RewardsChart(), id="rewards")
            yield CheckpointsTable(id="checkpoints")
            yield LogPanel(id="log", max_lines=self.host.log_lines)
        yield KeyFooter(compact=True)

    def action_cycle_log_level(self) -> None:
        from tinker_tui.app.view_maths import next_log_level

        log = self.query_one(LogPanel)
        log.set_minimum(next_log_level(log.minimum))
        self.host.refresh_panes()

    def update_from_state(self, state: DashboardState, now: float) -> None:
        self.query_one(RunStatusPanel).update_from_state(state, now)
        self.query_one(ThroughputPanel).update_from_state(state, now)
        self.query_one(DiscardedPanel).update_from_state(state, now)
        self.query_one(ChartPane).update_from_state(state, now)
        self.query_one(CheckpointsTable).update_from_state(state, now)
        self.query_one(LogPanel).update_from_state(state, now)
