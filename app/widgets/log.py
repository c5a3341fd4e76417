"""The engine's log lines, newest at the bottom, bounded, filtered by level (`l`)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog
from tinker_tui.app.run_model import LogLine, RunModel, level_at_least, normalise_level
from tinker_tui.app.widgets.updates import set_subtitle

LEVEL_CLASSES = {
    "warning": "log-panel--warning",
    "error": "log-panel--error",
    "debug": "log-panel--debug",
}

SHORT_LEVELS = {"warning": "WARN", "error": "ERROR", "info": "INFO", "debug": "DEBUG"}


class LogPanel(RichLog):
    """Shows `LogEmitted` lines as `MM:SS LEVEL message`; keeps at most `max_lines`."""

    ALLOW_MAXIMIZE = True

    COMPONENT_CLASSES = {
        "log-panel--time",
        "log-panel--level",
        "log-panel--warning",
        "log-panel--error",
        "log-panel--debug",
    }

    def __init__(
        self, *, max_lines: int = 500, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(
            max_lines=max_lines, wrap=False, markup=False, highlight=False, id=id, classes=classes
        )
        self._written = 0
        self._max = max_lines
        #: The least severe level shown ("debug" shows everything).
        self.minimum = "debug"
        self._rewrite = False

    def on_mount(self) -> None:
        self.border_title = "Log"

    def set_minimum(self, level: str) -> None:
        """Show only lines at `level` or above; takes effect at the next redraw."""
        self.minimum = level
        self._rewrite = True

    def format_line(self, model: RunModel, line: LogLine) -> Text:
        level = normalise_level(line.level)
        level_style = self.get_component_rich_style(LEVEL_CLASSES.get(level, "log-panel--level"))
        text = Text()
        text.append(model.since_start(line.time), self.get_component_rich_style("log-panel--time"))
        text.append(" ")
        text.append(f"{SHORT_LEVELS.get(level, level.upper())[:5]:<5}", level_style)
        text.append(" ")
        message_style = level_style if level == "error" else ""
        text.append(line.message.splitlines()[0] if line.message else "", message_style)
        return text

    def update_from_model(self, model: RunModel, now: float) -> None:
        shown = "all" if self.minimum == "debug" else f"≥ {self.minimum}"
        set_subtitle(self, f"{shown} · {model.log_total:,} lines · l: level")
        if self._rewrite:
            self._rewrite = False
            self.clear()
            for line in model.recent_log(self._max, self.minimum):
                self.write(self.format_line(model, line))
            self._written = model.log_total
            return
        new = model.log_total - self._written
        if new <= 0:
            return
        lines = list(model.log)[-min(new, len(model.log)) :] if model.log else []
        for line in lines:
            if level_at_least(line.level, self.minimum):
                self.write(self.format_line(model, line))
        self._written = model.log_total
