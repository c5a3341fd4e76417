"""The one-line run status: state badge, the run (its id: two dashboards on two runs of one
task tell them apart), backend and model, step k of N with ETA, policy version and elapsed
time."""

from __future__ import annotations

from pathlib import PurePath

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.view_maths import ended_text, format_elapsed, shorten_middle
from tinker_tui.app.widgets.checkpoints import UNCHANGED_STEPS
from tinker_tui.app.widgets.updates import set_state_class, update_static

STATE_CLASSES = ("-starting", "-running", "-paused", "-stopping", "-finished", "-failed")


def state_badge_text(state: DashboardState) -> str:
    """The badge text: `STARTING`, `RUNNING`, `PAUSED: reason`, `FINISHED (stopped)`, ..."""
    run_state = state.state
    if run_state in ("starting", "running") and state.phase_text() is not None:
        return "STARTING"
    if run_state == "paused":
        return f"PAUSED: {state.reason}" if state.reason else "PAUSED"
    if run_state == "finished":
        return f"FINISHED ({ended_text(state.status, state.cause)})" if state.status else "FINISHED"
    # a graceful stop waits for the step in flight (engine.training.pipeline)
    if run_state == "stopping":
        return "STOPPING: finishing the step · ctrl+c again: at once"
    return run_state.upper()


def state_class(state: DashboardState) -> str:
    if state.state == "finished" and state.status == "failed":
        return "-failed"
    if state.state == "running" and state.phase_text() is not None:
        return "-starting"
    return f"-{state.state}"


def version_texts(state: DashboardState) -> list[str]:
    """The policy version, longest (most telling) first: `weights v11`, and once steps
    have gone by without training (every group's rewards equal: no gradient) since when
    it stands: `weights v11 since step 12 (no gradient)`."""
    version = state.policy_version
    since = state.version_changed_at
    if since and state.step - since >= UNCHANGED_STEPS:
        return [
            f"weights v{version} since step {since} (no gradient)",
            f"weights v{version} (no gradient since {since})",
            f"v{version} (no gradient since {since})",
            f"v{version} (no gradient)",
            f"v{version}",
        ]
    return [f"weights v{version}", f"v{version}"]


def progress_text(state: DashboardState, now: float, width: int = 0) -> str:
    """`step 12/60 ETA 00:31 │ weights v12 │ 00:09` in `width` cells (0: any; the version's
    words shorten first); before the first step the start-up phase
    (`format warm-up 23/60 · loss 0.412 │ 00:09`); while paused the ETA says so."""
    elapsed = format_elapsed(state.elapsed(now))
    phase = state.phase_text()
    if phase is not None:
        return f"{phase} │ {elapsed}"
    steps = f"step {state.step}"
    if state.max_steps:
        steps += f"/{state.max_steps}"
    if state.state == "paused" and state.step < state.max_steps:
        steps += " ETA paused"
    else:
        eta = state.eta()
        if eta is not None and state.step < state.max_steps:
            steps += f" ETA {format_elapsed(eta)}"
    texts = [f"{steps} │ {version} │ {elapsed}" for version in version_texts(state)]
    return next((text for text in texts if len(text) <= width), texts[-1]) if width else texts[0]


def model_name(base_model: str) -> str:
    """The model as the header names it: a folder on disk (a Hugging Face download) by its
    own name, the last part of its path; a hub name (`Qwen/Qwen3-8B`) as it is."""
    if base_model.startswith(("/", "./", "../", "~")) or "\\" in base_model:
        return PurePath(base_model.rstrip("/\\")).name or base_model
    return base_model


def run_label_text(mode: str, state: DashboardState, width: int = 0) -> str:
    """`attached │ RUN_ID “NAME” │ backend · model` in `width` cells (0: any): a model
    folder shows its name, not its path; then the backend gives way, then the model, then
    the run id is cut in the middle, keeping its start (the task) and its end (the time and
    suffix that tell two runs of a task apart)."""
    who = state.run_id or state.name or "waiting for the run to start"
    if state.run_name:  # the run's own name, beside its id
        who = f"{who} “{state.run_name}”"
    lead = [mode] if mode else []
    name = model_name(state.base_model) if state.base_model else ""
    for where in (
        " · ".join(p for p in (state.backend, state.base_model) if p),
        " · ".join(p for p in (state.backend, name) if p),
        name,
        "",
    ):
        text = " │ ".join(lead + [who] + ([where] if where else []))
        if width <= 0 or len(text) <= width:
            return text
    room = width - sum(len(part) + len(" │ ") for part in lead)
    return " │ ".join(lead + [shorten_middle(who, max(12, room))])


#: The most cells the run label keeps before the version's words shorten.
RUN_LABEL_ROOM = 64
VERSION_TIP = (
    "weights vN: the policy version, one more for each step that trained. It stands "
    "still while steps have no gradient (every group's rewards equal): "
    "`since step K (no gradient)` says from when."
)


class RunStatusPanel(Horizontal):
    """A single line at the top of every view that says what the run is doing.

    Args:
        mode: Shown after the model name: "attached", "read-only", "finished run", or "" for a run
            this process drives.
    """

    def __init__(self, *, mode: str = "", id: str | None = None) -> None:
        super().__init__(id=id)
        self.mode = mode

    def compose(self) -> ComposeResult:
        yield Label("STARTING", id="state-badge", classes="-starting")
        yield Label("", id="run-label")
        yield Label("", id="progress-label")

    def update_from_state(self, state: DashboardState, now: float) -> None:
        badge = self.query_one("#state-badge", Label)
        update_static(badge, state_badge_text(state))
        set_state_class(badge, state_class(state))

        # the progress takes what the badge leaves beside the run label (its id and the
        # model's name, up to RUN_LABEL_ROOM): the version's words shorten first
        keep = min(RUN_LABEL_ROOM, len(run_label_text(self.mode, state, RUN_LABEL_ROOM * 2)))
        room = self.size.width - len(state_badge_text(state)) - 2 - keep - 2 - 2
        progress = self.query_one("#progress-label", Label)
        update_static(progress, progress_text(state, now, max(1, room)))
        if progress.tooltip != VERSION_TIP:
            progress.tooltip = VERSION_TIP
        label = self.query_one("#run-label", Label)
        update_static(label, run_label_text(self.mode, state, label.content_size.width))
