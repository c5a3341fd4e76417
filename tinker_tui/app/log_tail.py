"""The log lines a dashboard keeps: the last few hundred, repeats of a warning collapsed.

Its own concept, apart from the rest of `DashboardState`: the log pane, the failed-run
dialog and the headless reporter's tail all read the same lines, and the collapsing rule
(which lines count as repeats, and since when) has one home here."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence

from tinker_tui.app.dashboard_rows import LogLine
from tinker_tui.app.view_maths import (
    COLLAPSE_LOOKBACK,
    level_at_least,
    message_shape,
    normalise_level,
)
from tinker_tui.engine.events import LogEmitted


class LogTail:
    """The recent log lines (at most `keep`), with counts of what changed for the panes."""

    def __init__(self, keep: int = 500) -> None:
        self.lines: deque[LogLine] = deque(maxlen=keep)
        #: Every line added, repeats included (the pane's "N lines" and its scroll anchor).
        self.total = 0
        #: Bumped when a line already shown changed (a repeat collapsed into it).
        self.rewrites = 0
        #: Lines added since the engine last started: repeats collapse within one start only
        #: (a resumed run's "starting local backend" is not a repeat of the first one's).
        self._lines_this_start = 0

    def __iter__(self) -> Iterator[LogLine]:
        return iter(self.lines)

    def __len__(self) -> int:
        return len(self.lines)

    def engine_started(self) -> None:
        """The engine (re)starts: no line before this is a repeat of one after."""
        self._lines_this_start = 0

    def add(self, event: LogEmitted) -> None:
        """A line, or for a warning or an error the count of a recent one of the same shape
        (numbers aside, its first line: 35 rollouts failing alike are one line ×35, as the
        headless run counts them), since the engine last started. Info lines are never
        merged: they carry the results a user watches (an evaluation's reward, a checkpoint),
        and a count would hide all but the last."""
        line = LogLine(event.time, event.level, event.message)
        self.total += 1
        shape = message_shape(first_line(event.message))
        lookback = min(COLLAPSE_LOOKBACK, self._lines_this_start)
        if normalise_level(event.level) not in ("warning", "error"):
            lookback = 0
        recent = list(self.lines)[-lookback:] if lookback else []
        for back, old in enumerate(reversed(recent), start=1):
            if old.level == event.level and message_shape(first_line(old.message)) == shape:
                del self.lines[len(self.lines) - back]
                line = LogLine(event.time, event.level, event.message, old.count + 1)
                self.rewrites += 1
                break
        else:
            self._lines_this_start += 1
        self.lines.append(line)

    def recent(self, count: int, minimum: str = "debug") -> Sequence[LogLine]:
        """The last `count` lines at `minimum` level or above, oldest first."""
        lines = [line for line in self.lines if level_at_least(line.level, minimum)]
        return lines[-count:] if count > 0 else []


def first_line(message: str) -> str:
    return message.split("\n", 1)[0]
