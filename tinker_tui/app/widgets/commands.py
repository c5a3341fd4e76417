"""Control commands the engine received (pause, resume, checkpoint, eval, stop, set),
newest first, with the step they arrived at."""

from __future__ import annotations

from textual.widgets import DataTable

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.widgets.updates import fit_columns, set_subtitle


class CommandsTable(DataTable):
    """One row per `CommandReceived`."""

    ALLOW_MAXIMIZE = True

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="none", zebra_stripes=True)
        self.add_column("time", key="time")
        self.add_column("step", key="step")
        self.add_column("command", key="command")
        self.add_column("from", key="source")
        self._shown = -1

    def on_mount(self) -> None:
        self.border_title = "Commands"

    def update_from_model(self, model: DashboardState) -> None:
        count = len(model.commands)
        set_subtitle(self, f"{count} received")
        if count == self._shown:
            return
        self._shown = count
        self.clear()
        rows = [(model.since_start(command.time), str(command.step), command.describe(),
                 command.source) for command in reversed(model.commands)]
        fit_columns(self, rows)
        for row in rows:
            self.add_row(*row)
