"""The metric chart of a comparison: one `StepChart` drawing a line per run, each in its
run's colour (the comparison's table is the legend; the subtitle gives each run's last
value in its colour). With smoothing on, each run's line is its debiased EMA, as W&B
draws smoothed runs; checkpoint and knob markers are each run's, as in a run's chart."""

from __future__ import annotations

from collections.abc import Sequence

from tinker_tui.app.chart_options import chart_points, step_window, x_of
from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.view_maths import debiased_ema
from tinker_tui.app.widgets.step_chart import Line, StepChart, format_value
from tinker_tui.app.widgets.updates import set_subtitle

#: How many runs have a colour of their own (`compare-chart--run-N` in the stylesheet).
RUN_COLOURS = 8


def run_component(index: int) -> str:
    return f"compare-chart--run-{index % RUN_COLOURS}"


class CompareChart(StepChart):
    """`key` of every model in `models` (set by the view, in the table's order)."""

    COMPONENT_CLASSES = StepChart.COMPONENT_CLASSES | {run_component(i) for i in range(RUN_COLOURS)}

    def __init__(self, key: str, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(key, id=id, classes=classes)
        self.states: Sequence[DashboardState] = ()
        self._emas: dict[int, tuple[int, float, list[float]]] = {}

    def draw_key(self, state: DashboardState) -> tuple[object, ...]:
        per_run = tuple(
            (len(s), s[-1] if s else None, len(m.checkpoints), len(m.knob_markers()))
            for m in self.states
            for s in [m.series.get(self.key, ())]
        )
        return (per_run, state.ema_beta, self.size, self.chart_options.key())

    def run_ema(self, index: int, values: Sequence[float], beta: float) -> list[float]:
        count, cached_beta, cached = self._emas.get(index, (-1, -1.0, []))
        if count != len(values) or cached_beta != beta:
            cached = debiased_ema(values, beta) if beta > 0 else []
            self._emas[index] = (len(values), beta, cached)
        return cached

    def subtitle_text(self, state: DashboardState) -> str:
        parts = []
        for index, run in enumerate(self.states):
            points = run.series.get(self.key, ())
            if points:
                parts.append(f"{self.swatch(run_component(index))}{format_value(points[-1][1])}")
        return " ".join(parts) if parts else "no steps yet"

    def update_from_state(self, state: DashboardState, now: float) -> None:
        """Draw every run (`state`: the one whose smoothing the view uses)."""
        key = self.draw_key(state)
        if key[:1] != self._subtitle_key:
            self._subtitle_key = key[:1]
            set_subtitle(self, self.subtitle_text(state))
        if key == self._drawn:
            return
        self._drawn = key
        self.clear()
        options = self.chart_options
        lines: list[Line] = []
        marks: list[tuple[str, list[float]]] = []
        for index, run in enumerate(self.states):
            points = run.series.get(self.key, ())
            if not points:
                continue
            style = self._style(run_component(index))
            ema = self.run_ema(index, [v for _, v in points], state.ema_beta)
            drawn = [(s, e) for (s, _), e in zip(points, ema, strict=True)] if ema else points
            lines.append(Line(*chart_points(run, drawn, options), style))
            window = step_window(points[-1][0], options)
            for component, steps in (
                ("step-chart--checkpoint", {c.step for c in run.checkpoints}),
                ("step-chart--knob", {c.step for c in run.knob_markers()}),
            ):
                xs = [
                    x_of(run, m, options.x_axis)
                    for m in sorted(steps)
                    if window is None or window[0] <= m <= window[1]
                ]
                marks.append((self._style(component), [x for x in xs if x is not None]))
        self.draw(lines, marks=marks)
