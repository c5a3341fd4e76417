"""`?`: the keys and views, on top of whatever view is showing."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS: tuple[tuple[str, str], ...] = (
    ("p", "pause / resume (no new rollouts start; in-flight ones finish)"),
    ("c", "checkpoint now (after the current step)"),
    ("e", "evaluate now, alongside training"),
    ("q  ctrl+c", "stop gracefully, after a confirmation (step, checkpoint, flush)"),
    ("ctrl+q", "quit at once"),
    ("1 2 3 4", "views: dashboard, rollouts, control, metrics"),
    ("tab  click", "move between panes"),
    ("+  esc", "maximize the focused pane (the reward chart if none) / restore"),
    ("enter", "log, checkpoints: the line whole · rollouts: expand · control: edit"),
    ("s", "smoothing of the charts: 0.9 → 0.95 → 0.99 → off → 0.6 → 0.8"),
    ("l", "log level filter: all → info → warning → error"),
    ("/", "rollouts: filter (reward<0.5, stale, discarded, scenario:q03, words)"),
    ("home", "rollouts: show the newest steps (the list holds still otherwise)"),
    ("m", "metrics: pick the charts"),
    ("ctrl+p  :", "command palette"),
    ("?", "this help"),
)


def help_content(mode: str = "") -> Content:
    width = max(len(key) for key, _ in KEYS) + 2
    lines = [Content.assemble((f"{key:<{width}}", "bold $text-accent"), text)
             for key, text in KEYS]
    if mode == "attached":
        lines.append(Content(""))
        lines.append(Content.styled(
            "Attached to a run in another process: commands go to it; q asks whether to "
            "stop the run or only detach.", "$text-muted"))
    elif mode == "finished run":
        lines.append(Content(""))
        lines.append(Content.styled("A stored run: nothing to steer; q quits.", "$text-muted"))
    return Content("\n").join(lines)


class HelpScreen(ModalScreen[None]):
    """Keys and views; any of escape, q, ? closes it."""

    BINDINGS = [
        Binding("escape,q,question_mark", "close", "Close", id="close_help"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-dialog", classes="dialog"):
            yield Static(help_content(getattr(self.app, "mode_label", "")), id="help-text")

    def on_mount(self) -> None:
        dialog = self.query_one("#help-dialog")
        dialog.border_title = "tinker-tui keys"
        dialog.border_subtitle = "esc closes"

    def action_close(self) -> None:
        self.dismiss(None)
