"""The live knobs: current value, value at the start of the run, and how often changed."""

from __future__ import annotations

from collections.abc import Mapping

from textual import events
from textual.widgets import DataTable

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.screens.run_view import host
from tinker_tui.app.textual_private import KeysInOrder
from tinker_tui.app.view_maths import format_knob
from tinker_tui.app.widgets.in_order_keys import take_key_in_order
from tinker_tui.app.widgets.updates import fit_columns, set_subtitle
from tinker_tui.engine.config import LIVE_KNOBS


class KnobsTable(KeysInOrder, DataTable):
    """One row per live knob; `enter` on a row asks the app to edit it."""

    ALLOW_MAXIMIZE = True

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.add_column("knob", key="knob")
        self.add_column("value", key="value")
        self.add_column("at start", key="start")
        self.add_column("changed", key="changes")
        self._shown: dict[str, tuple[str, str, str]] = {
            name: ("-", "-", "0") for name in LIVE_KNOBS
        }
        for name, row in self._shown.items():
            self.add_row(name, *row, key=name)
        self._fit()

    def on_mount(self) -> None:
        self.border_title = "Knobs"
        set_subtitle(self, "enter: edit")

    async def take_key(self, event: events.Key) -> None:
        await take_key_in_order(self, event)

    def action_select_cursor(self) -> None:
        """`enter` edits the knob at once (not through a `RowSelected` message, which the
        keys typed behind it would overtake); a click still selects the row."""
        host(self.app).edit_knob(self.selected_knob)

    @property
    def selected_knob(self) -> str:
        return LIVE_KNOBS[max(0, min(self.cursor_row, len(LIVE_KNOBS) - 1))]

    def update_from_state(self, state: DashboardState, live: Mapping[str, float | int]) -> None:
        changes: dict[str, int] = {}
        for command in state.knob_markers():
            name = str(command.args.get("name"))
            changes[name] = changes.get(name, 0) + 1
        changed = False
        for name in LIVE_KNOBS:
            value = live.get(name, state.knobs.get(name))
            row = (
                format_knob(name, value),
                format_knob(name, state.initial_knobs.get(name)),
                str(changes.get(name, 0)),
            )
            if self._shown.get(name) == row:
                continue
            self._shown[name] = row
            self.update_cell(name, "value", row[0])
            self.update_cell(name, "start", row[1])
            self.update_cell(name, "changes", row[2])
            changed = True
        if changed:
            self._fit()

    def _fit(self) -> None:
        fit_columns(self, [(name, *row) for name, row in self._shown.items()])
