"""Control commands the engine received (pause, resume, checkpoint, eval, stop, set,
rollback), newest first, with the step they arrived at. A long one (a rollback and its
reason) wraps within the pane instead of running off its edge: at 80 columns the reason
is what was cut."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.widgets import DataTable

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.widgets.updates import fit_columns, set_subtitle

#: Narrower than this for the command column, rows stay one line (cut at the edge).
MIN_WRAP_WIDTH = 24


class CommandsTable(DataTable):
    """One row per `CommandReceived`."""

    ALLOW_MAXIMIZE = True

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="none", zebra_stripes=True)
        self.add_column("time", key="time")
        self.add_column("step", key="step")
        self.add_column("command", key="command")
        self.add_column("from", key="source")
        self._shown: tuple[int, int] = (-1, -1)
        self._state: DashboardState | None = None

    def on_mount(self) -> None:
        self.border_title = "Commands"

    def on_resize(self, event: events.Resize) -> None:
        if self._state is not None:
            self.update_from_state(self._state)

    def update_from_state(self, state: DashboardState) -> None:
        self._state = state
        count = len(state.commands)
        set_subtitle(self, f"{count} received")
        width = self.scrollable_content_region.width
        if (count, width) == self._shown:
            return
        self._shown = (count, width)
        self.clear()
        rows = [
            (state.since_start(command.time), str(command.step), command.describe(), command.source)
            for command in reversed(state.commands)
        ]
        widths = fit_columns(self, rows)
        column = self.columns[self.ordered_columns[2].key]
        # What the other columns and every cell's padding leave (and a scrollbar's width).
        room = width - sum(widths) + widths[2] - 2 * self.cell_padding * len(widths) - 2
        wrap = MIN_WRAP_WIDTH <= room < widths[2]
        column.auto_width = not wrap
        column.width = room if wrap else 0
        for time, step, command, source in rows:
            self.add_row(
                time,
                step,
                Text(command),
                source,
                height=None if wrap and cell_len(command) > room else 1,
            )
