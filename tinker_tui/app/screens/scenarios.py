"""The scenarios view (`6`): which prompts give signal. Per scenario id: the groups drawn
of it, its rollouts' mean reward and its trend over the steps, its pass rate (rollouts that
reached the run's best reward), the groups it lost without signal, and its class: never
solved, always solved (both give no gradient), high variance (where the signal comes from),
mostly solved or mostly failed.

`o` changes the order, `enter` opens its rollouts (the rollouts view, filtered to it).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.screens.run_view import RunView
from tinker_tui.app.signal_maths import SORTS
from tinker_tui.app.widgets.footer import KeyFooter
from tinker_tui.app.widgets.scenario_board import ScenarioBoard
from tinker_tui.app.widgets.status_bar import RunStatusPanel


class ScenariosScreen(RunView):
    """The scenario board."""

    AUTO_FOCUS = "#scenario-board"

    BINDINGS = [
        Binding("o", "cycle_order", "Order", id="scenario_order"),
    ]

    def __init__(self) -> None:
        super().__init__(id="scenarios")

    def compose(self) -> ComposeResult:
        yield RunStatusPanel(id="status", mode=self.host.mode_label)
        yield ScenarioBoard(id="scenario-board")
        yield KeyFooter(compact=True)

    def action_cycle_order(self) -> None:
        board = self.query_one(ScenarioBoard)
        orders = list(SORTS)
        board.order = orders[(orders.index(board.order) + 1) % len(orders)]
        self.host.refresh_panes()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if isinstance(event.data_table, ScenarioBoard) and event.row_key.value:
            event.stop()
            self.host.show_rollouts_of(str(event.row_key.value))

    def update_from_state(self, state: DashboardState, now: float) -> None:
        self.query_one(RunStatusPanel).update_from_state(state, now)
        self.query_one(ScenarioBoard).update_from_state(state, now)
