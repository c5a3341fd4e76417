"""Saved checkpoints, newest first: step, kind, name and when (time since the run began)."""

from __future__ import annotations

from textual.widgets import DataTable

from app.run_model import RunModel


class CheckpointsTable(DataTable):
    """One row per `CheckpointSaved`; the full path is the row's tooltip-free key."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, cursor_type="none", zebra_stripes=True)
        self._shown = -1
        # columns exist from the start, so rows added before mount size them correctly
        self.add_column("step", key="step")
        self.add_column("kind", key="kind")
        self.add_column("name", key="name")
        self.add_column("time", key="time")

    def on_mount(self) -> None:
        self.border_title = "Checkpoints"

    def update_from_model(self, model: RunModel, now: float) -> None:
        count = len(model.checkpoints)
        self.border_subtitle = f"{count} saved"
        if count == self._shown:
            return
        self._shown = count
        self.clear()
        for row in reversed(model.checkpoints):
            self.add_row(
                str(row.step),
                row.kind,
                row.name,
                model.since_start(row.time),
                key=row.path,
            )
