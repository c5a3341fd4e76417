"""Shown over everything when the terminal is smaller than the dashboard can draw legibly:
what the run is doing in a few lines, and what to do. It goes away when the terminal grows.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.widgets.status_bar import progress_text, state_badge_text
from tinker_tui.app.widgets.updates import update_static

#: The smallest terminal the views are laid out for (columns, rows).
MIN_WIDTH = 60
MIN_HEIGHT = 18


def too_small(width: int, height: int) -> bool:
    return width < MIN_WIDTH or height < MIN_HEIGHT


def compact_status(state: DashboardState, now: float, width: int, height: int) -> Content:
    lines = [
        Content.styled(f"Terminal too small: {width}×{height}", "bold $text-warning"),
        Content(f"tinker-tui needs {MIN_WIDTH}×{MIN_HEIGHT}. Resize, or q to quit."),
        Content(""),
        Content.styled(state_badge_text(state), "bold"),
    ]
    if state.name:
        lines.append(Content(state.name))
    lines += [Content(part.strip()) for part in progress_text(state, now).split("│")]
    if state.last_reward is not None:
        lines.append(Content(f"reward {state.last_reward:.3f}"))
    return Content("\n").join(lines)


class TooSmallScreen(ModalScreen[None]):
    """The notice; the run keys still work: `p`, `q` (and the app's `ctrl+c`, `ctrl+q`)."""

    BINDINGS = [
        Binding("p", "app.toggle_pause", "Pause/resume", id="too_small_pause"),
        Binding("q", "app.stop", "Quit", id="too_small_quit"),
    ]

    def compose(self) -> ComposeResult:
        yield Static("", id="too-small-text")

    def update_from_state(self, state: DashboardState, now: float) -> None:
        update_static(
            self.query_one("#too-small-text", Static),
            compact_status(state, now, self.app.size.width, self.app.size.height),
        )
