"""The signals view (`5`): why a run learns or not, one step at a time. A step's
distributions (reward and advantage histograms, the share of groups without signal,
response lengths and truncation, the reward's components, one that dominates flagged), its
funnel (sampled → discarded by reason → trained) and the groups' timeline (sampling,
waiting, training, coloured by policy version) read from the store's group life cycle.

`[` and `]` step back and forth, `end` follows the newest step again. The same view draws a
live run, `attach` and `show`.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.screens.run_view import RunView
from tinker_tui.app.widgets.footer import KeyFooter
from tinker_tui.app.widgets.signals import DistributionsPanel, FunnelPanel, TimelinePanel
from tinker_tui.app.widgets.status_bar import RunStatusPanel
from tinker_tui.engine.store import GroupSpan, StoreError, StoreReader

#: Seconds between reads of the timeline from the store while the run goes on.
TIMELINE_EVERY = 2.0
#: Groups the timeline reads (the pane shows the last that fit).
TIMELINE_GROUPS = 200


class SignalsScreen(RunView):
    """Distributions, funnel and timeline of the selected step."""

    AUTO_FOCUS = ""

    BINDINGS = [
        Binding("left_square_bracket", "step(-1)", "Step ←", key_display="[", id="step_back"),
        Binding("right_square_bracket", "step(1)", "Step →", key_display="]", id="step_forward"),
        Binding("end", "latest", "Newest", show=False, id="step_latest"),
    ]

    def __init__(self) -> None:
        super().__init__(id="signals")
        #: The step shown; None: the newest.
        self.chosen: int | None = None
        self.spans: list[GroupSpan] | None = None
        self._note = ""
        self._read_at: float | None = None
        self._read_revision = -1
        self._state: DashboardState | None = None

    def compose(self) -> ComposeResult:
        yield RunStatusPanel(id="status", mode=self.host.mode_label)
        with Grid(id="signals-panes"):
            yield DistributionsPanel(id="distributions")
            yield FunnelPanel(id="funnel")
            yield TimelinePanel(id="timeline")
        yield KeyFooter(compact=True)

    def shown_step(self, state: DashboardState) -> int:
        steps = state.groups.trained_steps
        if not steps:
            return 0
        if self.chosen is None:
            return steps[-1]
        return min(max(self.chosen, steps[0]), steps[-1])

    def action_step(self, delta: int) -> None:
        if self._state is None or not self._state.groups.trained_steps:
            return
        steps = sorted(set(self._state.groups.trained_steps))
        current = self.shown_step(self._state)
        later = [s for s in steps if (s > current if delta > 0 else s < current)]
        if later:
            self.chosen = later[0] if delta > 0 else later[-1]
            if self.chosen == steps[-1]:
                self.chosen = None  # the newest: follow new steps again
        self.update_from_state(self._state, self._state.now())

    def action_latest(self) -> None:
        self.chosen = None
        if self._state is not None:
            self.update_from_state(self._state, self._state.now())

    def update_from_state(self, state: DashboardState, now: float) -> None:
        self._state = state
        self.query_one(RunStatusPanel).update_from_state(state, now)
        step = self.shown_step(state)
        self.query_one(DistributionsPanel).show(state, step)
        self.query_one(FunnelPanel).show(state, step)
        self.query_one(TimelinePanel).show(self.spans, self._note)
        self._maybe_read(state, now)

    def _maybe_read(self, state: DashboardState, now: float) -> None:
        path = self.host.store_path
        if path is None or not state.run_id:
            self._note = "this run has no store: no timeline"
            return
        if state.groups.revision == self._read_revision:
            return
        if (
            self._read_at is not None
            and now - self._read_at < TIMELINE_EVERY
            and state.state != "finished"
        ):
            return
        self._read_at = now
        self._read_revision = state.groups.revision
        self.run_worker(
            self._read_spans(path, state.run_id),
            group="timeline",
            exclusive=True,
            exit_on_error=False,
        )

    async def _read_spans(self, path: object, run_id: str) -> None:
        try:
            reader = await StoreReader.open_readonly(path)  # type: ignore[arg-type]
        except StoreError as exc:
            self._note = f"timeline: {exc}"
            return
        try:
            self.spans = await reader.group_spans(run_id, last=TIMELINE_GROUPS)
        finally:
            await reader.close()
        self.query_one(TimelinePanel).show(self.spans, self._note)
