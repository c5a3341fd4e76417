"""The rollouts view: step → group → trajectory on the left, the selection in full on the
right; `/` filters; `enter` on a trajectory opens its tokens (`screens.tokens`), read from
the store. The same view draws a live run and a stored one.

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
        self._state: DashboardState | None = None

    def compose(self) -> ComposeResult:
        yield RunStatusPanel(id="status", mode=self.host.mode_label)
        yield InOrderInput(
            placeholder="filter: reward<0.5  stale  discarded  scenario:q03  words…",
            id="rollout-filter",
            select_on_focus=False,
        )
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
            if self._state is not None:
                self._show_selection(self._state)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "rollout-filter":
            event.stop()
            if not event.value.strip():
                event.input.remove_class("-visible")
            self.query_one(RolloutsTree).focus()

    def on_tree_node_selected(self, event: Tree.NodeSelected[RolloutRef]) -> None:
        ref = event.node.data
        if (
            ref is not None
            and ref.kind == "trajectory"
            and ref.group_id is not None
            and ref.index is not None
        ):
            self.run_worker(
                self.open_tokens(ref.group_id, ref.index),
                group="tokens",
                exclusive=True,
                exit_on_error=False,
            )

    async def open_tokens(self, group_id: int, index: int) -> None:
        """The trajectory's tokens from the store, in the token view; a note when the
        store has none (not trained, or older than `keep_token_steps`)."""
        from tinker_tui.engine.store import StoreError, StoreReader

        path, run_id = self.host.store_path, self._state.run_id if self._state else ""
        found = None
        if path is not None and run_id:
            try:
                reader = await StoreReader.open_readonly(path)
            except StoreError as exc:
                self.notify(str(exc), severity="warning")
                return
            try:
                found = await reader.trained_tokens(run_id, group_id, index)
            finally:
                await reader.close()
        if found is None:
            self.notify(
                f"no tokens kept for group {group_id} #{index + 1}: only trained "
                "trajectories of the latest keep_token_steps steps have them",
                severity="warning",
            )
            return
        from tinker_tui.app.screens.tokens import TokensScreen

        step, tokens, pieces = found
        self.app.push_screen(TokensScreen(self.token_title(group_id, index), step, tokens, pieces))

    def token_title(self, group_id: int, index: int) -> str:
        group = self._state.groups.get(group_id) if self._state is not None else None
        title = f"Group {group_id} · trajectory {index + 1}"
        if group is not None and index < len(group.trajectories):
            title += f" · {group.scenario_id} · reward {group.trajectories[index].reward:.3g}"
        return title

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[RolloutRef]) -> None:
        if self._state is not None:
            self.query_one(RolloutDetail).show(self._state, event.node.data)

    def _show_selection(self, state: DashboardState) -> None:
        node = self.query_one(RolloutsTree).cursor_node
        self.query_one(RolloutDetail).show(state, node.data if node is not None else None)

    def update_from_state(self, state: DashboardState, now: float) -> None:
        self._state = state
        self.query_one(RunStatusPanel).update_from_state(state, now)
        self.query_one(RolloutsTree).sync(state)
        self._show_selection(state)
