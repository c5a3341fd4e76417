"""The control view: the live knobs (edit with `enter`, confirmed), the commands the run
received, and buttons for the run-wide commands."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, DataTable, Label

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.screens.run_view import RunView
from tinker_tui.app.widgets.commands import CommandsTable
from tinker_tui.app.widgets.footer import KeyFooter
from tinker_tui.app.widgets.knobs import KnobsTable
from tinker_tui.app.widgets.status_bar import RunStatusPanel


class ControlScreen(RunView):
    """Steer the run: knobs and commands."""

    AUTO_FOCUS = "#knobs"

    def __init__(self) -> None:
        super().__init__(id="control")

    def compose(self) -> ComposeResult:
        yield RunStatusPanel(id="status", mode=self.host.mode_label)
        with Vertical(id="control-panes"):
            yield KnobsTable(id="knobs")
            with Horizontal(id="control-actions"):
                yield Button("Pause", id="action-pause", compact=True)
                yield Button("Checkpoint", id="action-checkpoint", compact=True)
                yield Button("Eval", id="action-eval", compact=True)
                yield Button("Stop", id="action-stop", compact=True, variant="error")
                yield Label("", id="control-note")
            yield CommandsTable(id="commands")
        yield KeyFooter(compact=True)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if isinstance(event.data_table, KnobsTable):
            event.stop()
            self.host.edit_knob(event.data_table.selected_knob)

    async def on_button_pressed(self, event: Button.Pressed) -> None:
        action = {
            "action-pause": "toggle_pause",
            "action-checkpoint": "checkpoint",
            "action-eval": "eval",
            "action-stop": "stop",
        }.get(event.button.id or "")
        if action:
            event.stop()
            await self.app.run_action(action)

    def update_from_state(self, state: DashboardState, now: float) -> None:
        self.query_one(RunStatusPanel).update_from_state(state, now)
        self.query_one(KnobsTable).update_from_state(state, self.host.live_knobs())
        self.query_one(CommandsTable).update_from_state(state)
        read_only = self.host.read_only
        paused = state.state == "paused"
        pause = self.query_one("#action-pause", Button)
        label = "Resume" if paused else "Pause"
        if str(pause.label) != label:
            pause.label = label
        for button in self.query(Button):
            disabled = read_only or state.state in ("finished", "stopping")
            if button.disabled != disabled:
                button.disabled = disabled
        mode = self.host.mode_label
        note = (
            f"{mode}: the program that trains this run steers it"
            if mode.startswith("watching")
            else "read-only view: the run cannot be steered from here"
            if read_only and self.host.attached
            else "read-only: this run is not running here"
            if read_only
            else "applies at the next rollout (temperature, workers) or step"
        )
        label_widget = self.query_one("#control-note", Label)
        if str(label_widget.content) != note:
            label_widget.update(note)
