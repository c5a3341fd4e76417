"""The one screen of the walking skeleton: status line and five panes."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Grid
from textual.screen import Screen
from textual.widgets import Footer, Header

from app.run_model import RunModel
from app.widgets.checkpoints import CheckpointsTable
from app.widgets.discarded import DiscardedPanel
from app.widgets.log import LogPanel
from app.widgets.rewards import RewardsChart
from app.widgets.status_bar import RunStatusPanel
from app.widgets.throughput import ThroughputPanel


class DashboardScreen(Screen):
    """Throughput, discards, reward chart, checkpoints and log of the running session.

    The panes do not watch events themselves: the app calls `update_from_model` on a timer.
    """

    AUTO_FOCUS = None  # nothing focused: no cursor highlight, footer shows only app keys

    def __init__(self, *, log_lines: int = 500) -> None:
        super().__init__(id="dashboard")
        self._log_lines = log_lines

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        yield RunStatusPanel(id="status")
        with Grid(id="panes"):
            yield ThroughputPanel(id="throughput")
            yield DiscardedPanel(id="discarded")
            yield CheckpointsTable(id="checkpoints")
            yield RewardsChart(id="rewards")
            yield LogPanel(id="log", max_lines=self._log_lines)
        yield Footer()

    def update_from_model(self, model: RunModel, now: float) -> None:
        if model.name:
            self.sub_title = model.name
        self.query_one(RunStatusPanel).update_from_model(model, now)
        self.query_one(ThroughputPanel).update_from_model(model, now)
        self.query_one(DiscardedPanel).update_from_model(model, now)
        self.query_one(RewardsChart).update_from_model(model, now)
        self.query_one(CheckpointsTable).update_from_model(model, now)
        self.query_one(LogPanel).update_from_model(model, now)
