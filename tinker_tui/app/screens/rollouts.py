"""The rollouts view: step → group → trajectory on the left, the selection in full on the
right; `/` filters. The same view draws a live run and a stored one.

The filter stays visible with its text while it applies; `/` goes back to it to edit it
(nothing is cleared by pressing it again), `enter` returns to the list, `escape` clears
it. The list holds still while steps arrive (see `RolloutsTree`); `home` shows new ones.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Input, Tree

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.rollout_filter import RolloutFilter
from tinker_tui.app.screens.run_view import RunView
from tinker_tui.app.widgets.footer import KeyFooter
from tinker_tui.app.widgets.in_order_keys import InOrderInput
from tinker_tui.app.widgets.rollout_detail import RolloutDetail
from tinker_tui.app.widgets.rollouts_tree import RolloutRef, RolloutsTree
from tinker_tui.app.widgets.status_bar import RunStatusPanel


class RolloutsScreen(RunView):
    """Browse every sampled group and trajectory; discarded groups carry their reason."""

    AUTO_FOCUS = "#rollout-tree"

    BINDINGS = [
        Binding("slash", "filter", "Filter", id="filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="clear_filter"),
    ]

    def __init__(self) -> None:
        super().__init__(id="rollouts")
        self._model: DashboardState | None = None

    def compose(self) -> ComposeResult:
        yield RunStatusPanel(id="status", mode=self.host.mode_label)
        yield InOrderInput(
            placeholder="filter: reward<0.5  stale  discarded  scenario:q03  words…",
            id="rollout-filter", select_on_focus=False)
        with Horizontal(id="rollout-panes"):
            yield RolloutsTree(id="rollout-tree")
            yield RolloutDetail(id="rollout-detail")
        yield KeyFooter(compact=True)

    def action_filter(self) -> None:
        field = self.query_one("#rollout-filter", Input)
        field.add_class("-visible")
        # Focus now, not after the keys already queued (`focus()` waits for them): keys
        # typed right behind `/` (tmux, a paste) go into the filter, not to the tree.
        self.set_focus(field)
        field.cursor_position = len(field.value)  # edit the filter, never replace it


    def filter_to(self, text: str) -> None:
        """Show only what `text` matches, the filter visible with it (the scenario board's
        `enter`); the list keeps the focus."""
        field = self.query_one("#rollout-filter", Input)
        field.value = text
        field.add_class("-visible")
        self.query_one(RolloutsTree).set_filter(RolloutFilter(text))
        self.query_one(RolloutsTree).focus()

    def action_clear_filter(self) -> None:
        field = self.query_one("#rollout-filter", Input)
        if self.maximized is not None:
            self.minimize()
            return
        if field.value:
            field.value = ""
        field.remove_class("-visible")
        self.query_one(RolloutsTree).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "rollout-filter":
            tree = self.query_one(RolloutsTree)
            tree.set_filter(RolloutFilter(event.value))
            if self._model is not None:
                self._show_selection(self._model)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "rollout-filter":
            event.stop()
            if not event.value.strip():
                event.input.remove_class("-visible")
            self.query_one(RolloutsTree).focus()

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[RolloutRef]) -> None:
        if self._model is not None:
            self.query_one(RolloutDetail).show(self._model, event.node.data)

    def _show_selection(self, model: DashboardState) -> None:
        node = self.query_one(RolloutsTree).cursor_node
        self.query_one(RolloutDetail).show(model, node.data if node is not None else None)

    def update_from_model(self, model: DashboardState, now: float) -> None:
        self._model = model
        self.query_one(RunStatusPanel).update_from_model(model, now)
        self.query_one(RolloutsTree).sync(model)
        self._show_selection(model)
