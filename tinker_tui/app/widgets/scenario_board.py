"""The scenario board: one row per scenario id, sortable (`screens.scenarios`)."""

from __future__ import annotations

import math
import time

from rich.text import Text
from textual import events
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, RowDoesNotExist

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.signal_maths import pass_line, scenario_board, sorted_board
from tinker_tui.app.widgets.updates import fit_columns, set_subtitle

#: A live board is rebuilt at most once per this many times its last rebuild's cost (at
#: most 5% of the CPU), and waits at most `MAX_WAIT` seconds for it.
PACE = 20.0
MAX_WAIT = 10.0
#: The classes' colours: no gradient (never or always solved) is what to look at.
KIND_STYLES = {"never solved": "red", "always solved": "yellow", "high variance": "green"}


def _fmt(value: float, spec: str) -> str:
    return "–" if not math.isfinite(value) else format(value, spec)


class ScenarioBoard(DataTable):
    """Scenarios by the order chosen (`order`, one of `signal_maths.SORTS`)."""

    ALLOW_MAXIMIZE = True

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        for label, key in (
            ("scenario", "scenario"),
            ("drawn", "drawn"),
            ("mean", "mean"),
            ("trend", "trend"),
            ("pass", "pass"),
            ("no signal", "no_signal"),
            ("class", "class"),
        ):
            self.add_column(label, key=key)
        self.order = "drawn"
        self._shown: tuple[object, ...] = ()
        self._next_at = -math.inf

    def on_mount(self) -> None:
        self.border_title = "Scenarios"

    def on_resize(self, event: events.Resize) -> None:
        self._shown = ()

    def update_from_state(self, state: DashboardState, now: float) -> None:
        """Rebuild the board when the groups changed; on a live run no oftener than
        `PACE` times what the last rebuild cost (it reads every group the model keeps:
        a 2,000-step run's 16,000 groups take a tenth of a second or more)."""
        shown = (state.groups.revision, self.order, self.size.width)
        if shown == self._shown:
            return
        if shown[1:] == self._shown[1:] and state.state != "finished" and now < self._next_at:
            return
        self._shown = shown
        started = time.perf_counter()
        self._fill(state)
        self._next_at = now + min(MAX_WAIT, PACE * (time.perf_counter() - started))

    def _fill(self, state: DashboardState) -> None:
        groups = list(state.groups.values())
        rows = sorted_board(scenario_board(groups), self.order)
        line = pass_line(groups)
        kinds: dict[str, int] = {}
        for row in rows:
            kinds[row.kind] = kinds.get(row.kind, 0) + 1
        summary = " · ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        set_subtitle(
            self,
            f"by {self.order} · pass: reward ≥ {line:g}"
            if line is not None
            else f"by {self.order} · no rollout rewarded yet",
        )
        self.border_title = f"Scenarios ({len(rows)}{': ' + summary if summary else ''})"
        selected = None
        if self.row_count and self.cursor_row >= 0:
            try:
                selected = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
            except CellDoesNotExist:
                selected = None
        self.clear()
        trend_width = 16 if self.size.width >= 100 else 8
        cells = [
            (
                row.scenario_id,
                str(row.drawn),
                _fmt(row.mean, ".2f"),
                row.trend_text(trend_width),
                _fmt(row.pass_rate, ".0%"),
                str(row.no_signal),
                row.kind,
            )
            for row in rows
        ]
        fit_columns(self, cells)
        for row, texts in zip(rows, cells, strict=True):
            self.add_row(
                *texts[:-1],
                Text(row.kind, style=KIND_STYLES.get(row.kind, "")),
                key=row.scenario_id,
            )
        if selected is not None:
            try:
                self.move_cursor(row=self.get_row_index(selected), animate=False)
            except RowDoesNotExist:  # gone (a rollback)
                pass
