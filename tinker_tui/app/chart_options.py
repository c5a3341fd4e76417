"""How the metrics charts draw (the same for every chart of a view): what the x axis
counts, whether y is on a log scale, and which steps are shown. No Textual here: the
charts (`widgets.step_chart`) read it; the views change it on their keys.

The x axis is a run's steps, its time since it started (wall time, as W&B's "relative
time": a resumed run's gap shows), or the tokens it has trained (`DashboardState.step_tokens`:
a running total the step metrics carry, else the sum of each step's `train/tokens`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tinker_tui.app.dashboard_state import DashboardState

XAxis = Literal["step", "elapsed", "tokens"]
X_AXES: tuple[XAxis, ...] = ("step", "elapsed", "tokens")
X_AXIS_WORDS: dict[XAxis, str] = {"step": "step", "elapsed": "time", "tokens": "tokens trained"}
#: The zooms `z` cycles through: every step, then the last N.
LAST_STEPS: tuple[int | None, ...] = (None, 20, 100, 500)


@dataclass
class ChartOptions:
    """What the charts of a view draw (see the module docstring)."""

    x_axis: XAxis = "step"
    log_y: bool = False
    #: Only the last N steps of each run (None: all).
    last_steps: int | None = None
    #: Only steps from..to (inclusive), chosen by the user; wins over `last_steps`.
    step_range: tuple[int, int] | None = None

    def key(self) -> tuple[object, ...]:
        """Changes whenever what the charts draw changes."""
        return (self.x_axis, self.log_y, self.last_steps, self.step_range)

    def cycle_x_axis(self) -> XAxis:
        self.x_axis = X_AXES[(X_AXES.index(self.x_axis) + 1) % len(X_AXES)]
        return self.x_axis

    def cycle_zoom(self) -> None:
        """All steps → last 20 → last 100 → last 500 → all; a chosen range ends."""
        if self.step_range is not None:
            self.step_range, self.last_steps = None, None
            return
        at = LAST_STEPS.index(self.last_steps) if self.last_steps in LAST_STEPS else 0
        self.last_steps = LAST_STEPS[(at + 1) % len(LAST_STEPS)]

    def describe(self) -> str:
        """The options in a few words, for a view's subtitle."""
        parts = [f"x: {X_AXIS_WORDS[self.x_axis]}"]
        if self.log_y:
            parts.append("log y")
        if self.step_range is not None:
            parts.append(f"steps {self.step_range[0]}-{self.step_range[1]}")
        elif self.last_steps is not None:
            parts.append(f"last {self.last_steps} steps")
        return " · ".join(parts)


def parse_step_range(text: str) -> tuple[int, int]:
    """`10-50` (or `10..50`, `10 50`) as (10, 50); ValueError with a message otherwise."""
    cleaned = text.strip().replace("..", "-").replace(" ", "-")
    parts = [p for p in cleaned.split("-") if p]
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError("a range of steps is FROM-TO, e.g. 10-50")
    low, high = int(parts[0]), int(parts[1])
    if low > high:
        raise ValueError(f"{low} is after {high}: FROM comes first")
    return low, high


def step_window(last_step: int, options: ChartOptions) -> tuple[int, int] | None:
    """The steps shown (inclusive) of a run whose last step is `last_step`; None: all."""
    if options.step_range is not None:
        return options.step_range
    if options.last_steps is not None:
        return max(0, last_step - options.last_steps + 1), last_step
    return None


def x_of(state: DashboardState, step: int, axis: XAxis) -> float | None:
    """Where `step` of the run sits on the x axis (None: not known there)."""
    if axis == "step":
        return float(step)
    if axis == "elapsed":
        return state.step_elapsed.get(step)
    return state.step_tokens.get(step)


def y_of(value: float, log_y: bool) -> float | None:
    """The value as drawn: its log10 on a log scale (None for a value a log cannot show)."""
    if not math.isfinite(value):
        return None
    if not log_y:
        return value
    return math.log10(value) if value > 0 else None


def chart_points(
    state: DashboardState,
    points: Sequence[tuple[int, float]],
    options: ChartOptions,
    *,
    last_step: int | None = None,
) -> tuple[list[float], list[float]]:
    """The (xs, ys) of a run's points as drawn under `options`: in the step window, on the
    chosen axes; points the axes cannot place are left out. `last_step`: the step the
    window ends at (default: the points' last)."""
    if not points:
        return [], []
    window = step_window(points[-1][0] if last_step is None else last_step, options)
    xs: list[float] = []
    ys: list[float] = []
    for step, value in points:
        if window is not None and not window[0] <= step <= window[1]:
            continue
        x = x_of(state, step, options.x_axis)
        y = y_of(value, options.log_y)
        if x is not None and y is not None:
            xs.append(x)
            ys.append(y)
    return xs, ys
