"""Saved checkpoints, newest first: step, kind, when (time since the run began) and path;
those the retention policy deleted are taken off (and counted in the title).

Paths are cut in the middle to the pane's width, so their start (where) and end (which
step) stay readable; `enter` on a row shows the path whole.
"""

from __future__ import annotations

from textual.widgets import DataTable

from tinker_tui.app.dashboard_rows import CheckpointRow
from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.view_maths import shorten_middle
from tinker_tui.app.widgets.updates import fit_columns, set_subtitle

#: The narrowest a path is cut to, however narrow the pane.
MIN_PATH = 12


class CheckpointsTable(DataTable):
    """One row per `CheckpointSaved`."""

    ALLOW_MAXIMIZE = True

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=True,
                         show_cursor=False)
        self._shown: tuple[int, int, int] = (-1, -1, -1)
        self._rows: list[CheckpointRow] = []
        self._model: DashboardState | None = None
        # columns exist from the start, so rows added before mount size them correctly
        self.add_column("step", key="step")
        self.add_column("kind", key="kind")
        self.add_column("time", key="time")
        self.add_column("path", key="path")

    def on_mount(self) -> None:
        self.border_title = "Checkpoints"

    def on_resize(self) -> None:
        """A pane with room for one line shows the newest checkpoint, not the header."""
        show = self.content_size.height >= 2
        if self.show_header != show:
            self.show_header = show

    def on_focus(self) -> None:
        self.show_cursor = True

    def on_blur(self) -> None:
        self.show_cursor = False

    def update_from_model(self, model: DashboardState, now: float) -> None:
        self._model = model
        count = len(model.checkpoints)
        deleted = f" ({model.checkpoints_deleted} older deleted)" if model.checkpoints_deleted \
            else ""
        set_subtitle(self, f"{count} saved{deleted}" + (" · enter: path" if count else ""))
        width = self.content_region.width or 60
        shown = (count, model.checkpoints_deleted, width)
        if shown == self._shown:
            return
        self._shown = shown
        cursor = self.cursor_row
        self.clear()
        self._rows = list(reversed(model.checkpoints))
        # the path takes what the other columns (and every column's padding) leave
        cells = [[str(row.step), row.kind, model.since_start(row.time), ""] for row in self._rows]
        widths = fit_columns(self, cells)
        path_width = max(MIN_PATH, width - sum(widths[:-1]) - 2 * self.cell_padding * len(widths))
        for cell, row in zip(cells, self._rows, strict=True):
            cell[-1] = shorten_middle(row.path, path_width)
        fit_columns(self, cells)
        for index, row in enumerate(self._rows):
            self.add_row(*cells[index], key=f"{count - index}:{row.path}")
        if self._rows:
            self.move_cursor(row=min(cursor, len(self._rows) - 1))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if not 0 <= event.cursor_row < len(self._rows):
            return
        from tinker_tui.app.screens.text_view import TextScreen

        row = self._rows[event.cursor_row]
        self.app.push_screen(TextScreen(f"Checkpoint at step {row.step} ({row.kind})",
                                        f"{row.name}\n\n{row.path}"))
