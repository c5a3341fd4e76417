"""What the screens use of the app, typed: `DashboardHost` (the app implements it) and
`RunView`, the base of the views the app redraws from the run model on its timer."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, cast

from textual import events
from textual.app import App
from textual.screen import Screen

from tinker_tui.app.dashboard_state import DashboardState


class DashboardHost(Protocol):
    """The app as its screens see it (`app.tui.TinkerTuiApp`; checked there by mypy)."""

    @property
    def mode_label(self) -> str:
        """"" for a run driven here, "attached" or "finished run" otherwise."""
        ...

    @property
    def log_lines(self) -> int: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def attached(self) -> bool: ...

    def refresh_panes(self) -> None: ...

    @property
    def checkpoint_dir(self) -> Path | None:
        """Where a local run keeps its checkpoints on disk; None when not known here."""
        ...

    def edit_knob(self, name: str) -> None: ...

    def release_keys(self) -> None:
        """A dialog has focus: the keys typed while it opened go to it."""
        ...

    def live_knobs(self) -> Mapping[str, float | int]: ...

    def leave_finished(self) -> None:
        """`q` on the finish screen: leave with the ended run's exit code."""
        ...


def host(app: App[Any]) -> DashboardHost:
    """The app a screen is mounted in, as its `DashboardHost` (screens live only there)."""
    return cast(DashboardHost, app)


class RunView(Screen[None]):
    """A view of the run (dashboard, rollouts, metrics, control): the app calls
    `update_from_model` on its timer; the view's panes never watch events themselves."""

    @property
    def host(self) -> DashboardHost:
        return host(self.app)

    def update_from_model(self, model: DashboardState, now: float) -> None:
        raise NotImplementedError

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        """A view switched back to resumes as a screen popped back to does: without
        restyling every widget. `App.switch_mode` asks for a restyle, which dirties every
        widget (the reward chart redraws all its points) and costs more CPU than the rest
        of the switch, while the key that switched waits. Nothing it would change can have
        changed: the app's CSS (a theme) is applied by `switch_mode` itself to a screen that
        missed it, and the views are not styled while hidden."""
        if event.refresh_styles:
            event.prevent_default()  # Screen's handler runs once, below, without it
            super()._on_screen_resume(events.ScreenResume(refresh_styles=False))
