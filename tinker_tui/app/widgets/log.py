"""The engine's log lines, newest at the bottom, bounded, filtered by level (`l`).

One line per message, cut to the pane's width; `enter` on a line opens it whole. A warning
or an error repeated with only its numbers changed is shown once, as its latest form with a
count (info lines, the results a user watches, never are).
"""

from __future__ import annotations

from textual.content import Content
from textual.widgets import OptionList

from tinker_tui.app.dashboard_rows import LogLine
from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.view_maths import fit_parts, level_at_least, normalise_level
from tinker_tui.app.widgets.updates import set_subtitle

LEVEL_STYLES = {
    "warning": "$text-warning",
    "error": "bold $text-error",
    "debug": "$text-muted",
    "info": "$text-primary",
}

SHORT_LEVELS = {"warning": "WARN", "error": "ERROR", "info": "INFO", "debug": "DEBUG"}


def log_line_content(state: DashboardState, line: LogLine) -> Content:
    """`MM:SS LEVEL ×N message`, on one line (the first line of the message); the count
    comes first so a cut line still shows it."""
    level = normalise_level(line.level)
    style = LEVEL_STYLES.get(level, "$text-primary")
    first = line.message.splitlines()[0] if line.message else ""
    more = " …" if "\n" in line.message else ""
    return Content.assemble(
        (state.since_start(line.time), "$text-muted"),
        " ",
        (f"{SHORT_LEVELS.get(level, level.upper())[:5]:<5}", style),
        " ",
        (f"×{line.count} " if line.count > 1 else "", "bold $text-accent"),
        (first + more, style if level == "error" else ""),
    )


def log_line_text(state: DashboardState, line: LogLine) -> str:
    """The whole line, for the `enter` view."""
    repeats = f"\n\n(seen {line.count} times; this is the latest)" if line.count > 1 else ""
    return f"{state.since_start(line.time)}  {line.level.upper()}\n\n{line.message}{repeats}"


class LogPanel(OptionList):
    """Shows `LogEmitted` lines; keeps at most `max_lines`. Follows the newest line until
    the user moves the cursor up; `end` follows again."""

    ALLOW_MAXIMIZE = True

    def __init__(
        self, *, max_lines: int = 500, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(id=id, classes=classes)
        self._max = max_lines
        self._log_lines: list[LogLine] = []
        self._written = 0
        self._rewrites = 0
        #: The least severe level shown ("debug" shows everything).
        self.minimum = "debug"
        self._rewrite = False
        self._state: DashboardState | None = None

    def on_mount(self) -> None:
        self.border_title = "Log"

    def set_minimum(self, level: str) -> None:
        """Show only lines at `level` or above; takes effect at the next redraw."""
        self.minimum = level
        self._rewrite = True

    @property
    def following(self) -> bool:
        return self.highlighted is None or self.highlighted >= self.option_count - 1

    @property
    def lines(self) -> list[LogLine]:
        """The lines shown, oldest first."""
        return list(self._log_lines)

    def _show_counts(self, state: DashboardState) -> None:
        """The level shown and how many lines, of how many, in the border: a filter that
        hides every line reads "0 of N", not N."""
        if self.minimum == "debug":
            counts = f"all · {state.log.total:,} lines"
        else:
            counts = f"≥ {self.minimum} · {len(self._log_lines):,} of {state.log.total:,} lines"
        # whole parts only (a narrow pane read "enter: whole · l…"); `?` lists the keys
        width = max(0, self.region.width - 6)  # between the border's corners and spaces
        set_subtitle(
            self,
            fit_parts([counts, "enter: whole", "l: level"], width)
            if width
            else f"{counts} · enter: whole · l: level",
        )

    def update_from_state(self, state: DashboardState, now: float) -> None:
        self._state = state
        new = state.log.total - self._written
        if not (self._rewrite or state.log.rewrites != self._rewrites or new > 0):
            self._show_counts(state)
            return
        follow = self.following
        if self._rewrite or state.log.rewrites != self._rewrites:
            self._rewrite = False
            self._rewrites = state.log.rewrites
            self._log_lines = list(state.log.recent(self._max, self.minimum))
            self.set_options([log_line_content(state, line) for line in self._log_lines])
        else:
            added = [
                line
                for line in list(state.log.lines)[-min(new, len(state.log)) :]
                if level_at_least(line.level, self.minimum)
            ]
            self._log_lines += added
            self.add_options([log_line_content(state, line) for line in added])
            extra = len(self._log_lines) - self._max
            for _ in range(max(0, extra)):
                self._log_lines.pop(0)
                self.remove_option_at_index(0)
        self._written = state.log.total
        self._show_counts(state)
        if follow:
            if self.highlighted is not None and self._log_lines:
                self.highlighted = len(self._log_lines) - 1
            self.scroll_end(animate=False, immediate=True)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if self._state is None or not 0 <= event.option_index < len(self._log_lines):
            return
        from tinker_tui.app.screens.text_view import TextScreen

        line = self._log_lines[event.option_index]
        self.app.push_screen(TextScreen("Log line", log_line_text(self._state, line)))

    def on_focus(self) -> None:
        if self.highlighted is None and self._log_lines:
            self.highlighted = len(self._log_lines) - 1  # the newest line, still following

    def on_resize(self) -> None:
        if self.following:
            self.call_after_refresh(self.scroll_end, animate=False)
