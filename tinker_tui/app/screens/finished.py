"""The finish screen: the run ended (completed, stopped, failed or interrupted) and the
dashboard stays, with how it ended, its rewards and last checkpoint, and the commands to look
at it again or continue it, until `q`. `esc` hides it to look at the dashboard (`q` there leaves too)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from tinker_tui.app.run_summary import (
    RunSummary,
    failed_groups_text,
    next_commands,
    stuck_text,
    trained_nothing_text,
    undone_best_text,
)
from tinker_tui.app.screens.run_view import host

TITLES = {
    "completed": "Run completed",
    "stopped": "Run stopped",
    "failed": "Run failed",
    "interrupted": "Run interrupted",
}
#: Titles by `RunFinished.cause`, where the status alone would mislead.
CAUSE_TITLES = {
    "no_signal": "Run trained nothing",
    "budget": "Run stopped at its budget",
    "health": "Run stopped by a health check",
}


def title(summary: RunSummary) -> str:
    return CAUSE_TITLES.get(summary.cause) or TITLES.get(summary.status, "Run ended")


def finished_content(summary: RunSummary, width: int = 0) -> Content:
    """The screen's text, from the same summary the terminal gets on exit. A command that
    does not fit beside its label in `width` cells (0: any) goes on a line of its own
    below it, whole: copying it gives one line."""
    rows: list[tuple[str, str]] = []
    if summary.reason:
        rows.append(("reason", summary.reason))
    of = f" of {summary.max_steps}" if summary.max_steps else ""
    rows.append(("steps", f"{summary.step}{of}"))
    if summary.final_reward is None:
        rows.append(("reward", "no step trained"))
    else:
        rows.append(
            (
                "reward",
                f"final {summary.final_reward:.3f} · best "
                f"{summary.best_reward:.3f} (step {summary.best_step})"
                + (
                    f" · {undone_best_text(summary.undone_best)}"
                    if summary.undone_best is not None
                    else ""
                ),
            )
        )
    if nothing := trained_nothing_text(summary):
        rows.append(("trained", nothing))
    rows.append(
        (
            "checkpoint",
            f"{summary.checkpoint} (step {summary.checkpoint_step})"
            if summary.checkpoint
            else "none",
        )
    )
    if summary.failed_groups or summary.failed_rollouts:
        rows.append(("errors", failed_groups_text(summary)))
    rows += [("stuck", stuck_text(stuck)) for stuck in summary.stalled]
    if summary.db_path is not None:
        rows.append(("store", str(summary.db_path)))
    commands = next_commands(summary)
    label = max(len(what) for what, _ in rows + commands) + 2
    lines = [
        Content.assemble((f"{what:<{label}}", "bold $text-accent"), value) for what, value in rows
    ]
    if summary.status == "failed" and summary.last_log:  # why it failed, before what next
        lines.append(Content(""))
        lines.append(Content.styled("last log lines", "bold $text-error"))
        lines += [Content.styled(line, "$text-muted") for line in summary.last_log]
    lines.append(Content(""))
    for what, command in commands:
        if width and label + len(command) > width:
            lines.append(Content.styled(what, "bold $text-accent"))
            lines.append(Content.styled(command, "bold"))
        else:
            lines.append(
                Content.assemble((f"{what:<{label}}", "bold $text-accent"), (command, "bold"))
            )
    if summary.trackers:  # where W&B / TensorBoard put the run's records
        lines.append(Content(""))
        lines += [Content(line) for line in summary.trackers]
    return Content("\n").join(lines)


class FinishedScreen(ModalScreen[None]):
    """How the run ended (see the module docstring); `q` leaves the app."""

    DEFAULT_CSS = """
    FinishedScreen #finished-dialog {
        width: 100;
        max-width: 95%;
        padding: 0 1;
        &.-completed { border: thick $success; }
        &.-stopped, &.-interrupted, &.-no_signal { border: thick $warning; }
        &.-failed { border: thick $error; }
    }
    FinishedScreen #finished-scroll {
        height: auto;
        max-height: 100%;
    }
    """

    BINDINGS = [
        Binding("q,ctrl+c", "leave", "Quit", id="finished_quit", priority=True),
        Binding("escape", "close", "Dashboard", id="finished_close"),
    ]

    def __init__(self, summary: RunSummary) -> None:
        super().__init__()
        self.summary = summary

    def compose(self) -> ComposeResult:
        kind = "no_signal" if self.summary.cause == "no_signal" else self.summary.status
        with Vertical(id="finished-dialog", classes=f"dialog -{kind}"):
            with VerticalScroll(id="finished-scroll"):
                yield Static(finished_content(self.summary), id="finished-text")

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """As wide as its longest line needs (the commands, whole), within the screen."""
        text = finished_content(self.summary)
        longest = max((line.cell_length for line in text.split("\n")), default=0)
        dialog = self.query_one("#finished-dialog")
        room = max(40, self.size.width * 95 // 100)
        frame = dialog.styles.gutter.width + 2  # border and padding, and the scrollbar
        dialog.styles.width = min(room, max(60, longest + frame))
        self.query_one("#finished-text", Static).update(
            finished_content(self.summary, min(room, longest + frame) - frame)
        )

    def on_mount(self) -> None:
        self._fit()
        dialog = self.query_one("#finished-dialog")
        dialog.border_title = f"{title(self.summary)}: {self.summary.run_id}"
        dialog.border_subtitle = "q quit · esc dashboard"

    def show_summary(self, summary: RunSummary) -> None:
        """The run's summary again, with what its engine wrote while closing."""
        self.summary = summary
        self._fit()

    def action_leave(self) -> None:
        host(self.app).leave_finished()

    def action_close(self) -> None:
        self.dismiss(None)
