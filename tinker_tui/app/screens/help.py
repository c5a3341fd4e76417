"""`?`: the keys and views, on top of whatever view is showing."""

from __future__ import annotations

import textwrap

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from tinker_tui.app.screens.run_view import host

#: One line each at 80x24 (descriptions up to 56 cells): the help fits without scrolling.
KEYS: tuple[tuple[str, str], ...] = (
    ("p", "pause / resume (in-flight rollouts finish)"),
    ("c", "checkpoint now (after the current step)"),
    ("e", "evaluate now, alongside training"),
    ("b", "roll back to the best checkpoint, lr × rollback_lr_scale"),
    ("q  ctrl+c", "stop gracefully, detach (the run goes on), or cancel"),
    ("ctrl+q", "leave at once (a run in its own process goes on)"),
    ("1-6", "dashboard rollouts control metrics signals scenarios"),
    ("tab  click", "move between panes"),
    ("+  esc", "maximize the focused pane (or the chart) / restore"),
    ("enter  t", "a line whole · expand · edit · t: chat with a checkpoint"),
    ("s", "smoothing: 0.9 → 0.95 → 0.99 → off → 0.6 → 0.8"),
    ("l", "log level: all → info → warning → error"),
    ("/  home", "rollouts: filter (reward<0.5, stale, …) · newest"),
    ("m", "metrics: pick the charts"),
    ("x l z r", "metrics: x axis · log scale · last N steps · a range"),
    ("[ ]  o", "signals: step ← → · scenarios: order (enter: rollouts)"),
    ("R  n", "runs (space marks, c compares) · name and note the run"),
    ("ctrl+p  :", "command palette"),
    ("?", "this help"),
)


def help_content(mode: str = "", width: int = 80) -> Content:
    """The keys in two columns, each description wrapped to `width` cells under itself."""
    column = max(len(key) for key, _ in KEYS) + 2
    room = max(20, width - column)
    lines: list[Content] = []
    for key, text in KEYS:
        for index, part in enumerate(textwrap.wrap(text, room) or [""]):
            head = f"{key:<{column}}" if index == 0 else " " * column
            lines.append(Content.assemble((head, "bold $text-accent"), part))
    note = ""
    if mode == "attached":
        note = (
            "Attached to a run in another process: commands go to it; q asks whether to "
            "stop the run or only detach."
        )
    elif mode == "read-only":
        note = (
            "A read-only view of a running run: pause, checkpoint, eval, knobs and stop "
            "are disabled; q closes this view."
        )
    elif mode.startswith("watching"):
        note = (
            "Watching a run another program trains, from its run folder: that program "
            "steers it, so pause, checkpoint, eval, knobs and stop are off here; q closes "
            "this view and the run goes on."
        )
    elif mode == "finished run":
        note = "A stored run: nothing to steer; q quits."
    if note:
        lines.append(Content(""))
        lines += [Content.styled(part, "$text-muted") for part in textwrap.wrap(note, width)]
    return Content("\n").join(lines)


class HelpScreen(ModalScreen[None]):
    """Keys and views; any of escape, q, ? closes it."""

    BINDINGS = [
        Binding("escape,q,question_mark", "close", "Close", id="close_help"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-dialog", classes="dialog"):
            yield Static(help_content(host(self.app).mode_label), id="help-text")

    def on_mount(self) -> None:
        dialog = self.query_one("#help-dialog")
        dialog.border_title = "tinker-tui keys"
        dialog.border_subtitle = "esc closes"
        self.call_after_refresh(self._wrap)

    def on_resize(self) -> None:
        self.call_after_refresh(self._wrap)

    def _wrap(self) -> None:
        """Wrap the descriptions to the dialog's width (known once it is laid out); the
        subtitle says when it scrolls (a terminal smaller than 80x24)."""
        width = self.query_one("#help-text", Static).content_region.width
        if width > 0:
            self.query_one("#help-text", Static).update(
                help_content(host(self.app).mode_label, width)
            )
        self.call_after_refresh(self._say_scroll)

    def _say_scroll(self) -> None:
        dialog = self.query_one("#help-dialog")
        dialog.border_subtitle = "↑↓ more · esc closes" if dialog.max_scroll_y > 0 else "esc closes"

    def action_close(self) -> None:
        self.dismiss(None)
