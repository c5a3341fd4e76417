"""The checkpoints a dashboard lists: saved, asked for, deleted by retention, undone.

Its own concept, apart from the rest of `DashboardState`: the checkpoints pane and the
headless summary read it, and the rules (a save the user then asks for is the same row,
marked; retention deletes count; a rollback drops what came after) have one home here."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from tinker_tui.app.dashboard_rows import CheckpointRow
from tinker_tui.engine.events import CheckpointDeleted, CheckpointSaved


class CheckpointBook:
    """The run's checkpoints still on disk, oldest first, and how many were deleted."""

    def __init__(self) -> None:
        self.rows: list[CheckpointRow] = []
        #: Checkpoints shown once and since deleted by the retention policy.
        self.deleted = 0

    def __iter__(self) -> Iterator[CheckpointRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def saved(self, event: CheckpointSaved) -> None:
        row = CheckpointRow(
            event.step, event.kind, event.name, event.path, event.time, event.requested
        )
        again = [i for i, c in enumerate(self.rows) if c.path == event.path]
        if again:  # saved before, now asked for: the same checkpoint, marked
            self.rows[again[-1]] = replace(row, time=self.rows[again[-1]].time)
        else:
            self.rows.append(row)

    def removed(self, event: CheckpointDeleted) -> None:
        kept = [c for c in self.rows if c.path != event.path]
        self.deleted += len(self.rows) - len(kept)
        self.rows = kept

    def rewind(self, step: int) -> None:
        """A rollback to `step`: the checkpoints after it are gone."""
        self.rows = [c for c in self.rows if c.step <= step]
