"""The one-line run status: state badge, run name, backend and model, step and version."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label

from app.run_model import RunModel, format_elapsed
from app.widgets.updates import set_state_class, update_static

STATE_CLASSES = ("-starting", "-running", "-paused", "-stopping", "-finished", "-failed")


def state_badge_text(model: RunModel) -> str:
    """The badge text: `RUNNING`, `PAUSED: reason`, `FINISHED (stopped)`, ..."""
    state = model.state
    if state == "paused":
        return f"PAUSED: {model.reason}" if model.reason else "PAUSED"
    if state == "finished":
        return f"FINISHED ({model.status})" if model.status else "FINISHED"
    return state.upper()


def state_class(model: RunModel) -> str:
    if model.state == "finished" and model.status == "failed":
        return "-failed"
    return f"-{model.state}"


class RunStatusPanel(Horizontal):
    """A single line under the header that says what the run is doing."""

    def compose(self) -> ComposeResult:
        yield Label("STARTING", id="state-badge", classes="-starting")
        yield Label("", id="run-label")
        yield Label("", id="progress-label")

    def update_from_model(self, model: RunModel, now: float) -> None:
        badge = self.query_one("#state-badge", Label)
        update_static(badge, state_badge_text(model))
        set_state_class(badge, state_class(model))

        parts = [model.name or "waiting for the run to start"]
        if model.backend or model.base_model:
            parts.append(" · ".join(p for p in (model.backend, model.base_model) if p))
        update_static(self.query_one("#run-label", Label), " │ ".join(parts))

        steps = f"step {model.step}"
        if model.max_steps:
            steps += f"/{model.max_steps}"
        progress = (
            f"{steps} │ policy v{model.policy_version} │ {format_elapsed(model.elapsed(now))}"
        )
        update_static(self.query_one("#progress-label", Label), progress)
