"""What the screens use of the app, typed: `DashboardHost` (the app implements it) and
`RunView`, the base of the views the app redraws from the run model on its timer."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, cast

from textual.app import App

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.textual_private import ResumesUnstyled


class DashboardHost(Protocol):
    """The app as its screens see it (`app.tui.TinkerTuiApp`; checked there by mypy)."""

    @property
    def mode_label(self) -> str:
        """ "" for a run driven here, "attached", "finished run" or "read-only"
        otherwise, "watching (cookbook)" for a run another program trains."""
        ...

    @property
    def log_lines(self) -> int: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def attached(self) -> bool: ...

    def refresh_panes(self) -> None: ...

    @property
    def store_path(self) -> Path | None:
        """The run store, where the views read what the model does not keep (None: the
        run has none)."""
        ...

    def show_rollouts_of(self, scenario_id: str) -> None:
        """Switch to the rollouts view, filtered to one scenario."""
        ...

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


class RunView(ResumesUnstyled):
    """A view of the run (dashboard, rollouts, metrics, control): the app calls
    `update_from_model` on its timer; the view's panes never watch events themselves.
    Switched back to, it is not restyled (`ResumesUnstyled`)."""

    @property
    def host(self) -> DashboardHost:
        return host(self.app)

    def update_from_state(self, state: DashboardState, now: float) -> None:
        raise NotImplementedError
