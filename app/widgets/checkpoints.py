"""Saved checkpoints, newest first: step, kind, path and when (time since the run began)."""

from __future__ import annotations

from textual.widgets import DataTable
from tinker_tui.app.run_model import RunModel
from tinker_tui.app.widgets.updates import set_subtitle


class CheckpointsTable(DataTable):
    """One row per `CheckpointSaved`."""

    ALLOW_MAXIMIZE = True

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=True,
                         show_cursor=False)
        self._shown = -1
        # columns exist from the start, so rows added before mount size them correctly
        self.add_column("step", key="step")
        self.add_column("kind", key="kind")
        self.add_column("time", key="time")
        self.add_column("path", key="path")

    def on_mount(self) -> None:
        self.border_title = "Checkpoints"

    def on_focus(self) -> None:
        self.show_cursor = True

    def on_blur(self) -> None:
        self.show_cursor = False

    def update_from_model(self, model: RunModel, now: float) -> None:
        count = len(model.checkpoints)
        set_subtitle(self, f"{count} saved")
        if count == self._shown:
            return
        self._shown = count
        self.clear()
        for index, row in enumerate(reversed(model.checkpoints)):
            self.add_row(
                str(row.step),
                row.kind,
                model.since_start(row.time),
                row.path,
                key=f"{count - index}:{row.path}",
            )
