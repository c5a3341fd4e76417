"""The engine's log lines, newest at the bottom, bounded."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog

from app.run_model import LogLine, RunModel

LEVEL_CLASSES = {
    "WARNING": "log-panel--warning",
    "WARN": "log-panel--warning",
    "ERROR": "log-panel--error",
    "CRITICAL": "log-panel--error",
    "DEBUG": "log-panel--debug",
}

SHORT_LEVELS = {"WARNING": "WARN", "CRITICAL": "CRIT"}


class LogPanel(RichLog):
    """Shows `LogEmitted` lines as `MM:SS LEVEL message`; keeps at most `max_lines`."""

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

    def on_mount(self) -> None:
        self.border_title = "Log"

    def format_line(self, model: RunModel, line: LogLine) -> Text:
        level = line.level.upper()
        level_style = self.get_component_rich_style(LEVEL_CLASSES.get(level, "log-panel--level"))
        text = Text()
        text.append(model.since_start(line.time), self.get_component_rich_style("log-panel--time"))
        text.append(" ")
        text.append(f"{SHORT_LEVELS.get(level, level)[:5]:<5}", level_style)
        text.append(" ")
        message_style = level_style if level in ("ERROR", "CRITICAL") else ""
        text.append(line.message, message_style)
        return text

    def update_from_model(self, model: RunModel, now: float) -> None:
        new = model.log_total - self._written
        if new <= 0:
            return
        lines = list(model.log)[-min(new, len(model.log)) :] if model.log else []
        for line in lines:
            self.write(self.format_line(model, line))
        self._written = model.log_total
        self.border_subtitle = f"{model.log_total:,} lines"
