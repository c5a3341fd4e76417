"""A braille line chart of one metric per training step: the values, their debiased EMA at
the run's smoothing (`s`), and dotted markers where checkpoints were saved and knobs
changed. The reward chart on the dashboard and every chart of the metrics view are one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from textual_plot import HiResMode, PlotWidget
from textual_plot.axis_formatter import NumericAxisFormatter

from tinker_tui.app.chart_options import ChartOptions, chart_points, step_window, x_of
from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.view_maths import debiased_ema
from tinker_tui.app.widgets.updates import set_subtitle

Points = Sequence[tuple[int, float]]

#: The fewest plot rows a chart keeps: its step labels go first (`StepChart.on_resize`).
MIN_PLOT_ROWS = 3
#: The closest two markers (◆, ┊) are drawn, in columns: denser ones are thinned, so a ◆
#: drawn over the line covers at most one cell in this many.
MARKER_SPACING = 6


def thin_markers(
    points: Sequence[tuple[float, float]],
    first: float,
    last: float,
    columns: int,
    spacing: int = MARKER_SPACING,
) -> list[tuple[float, float]]:
    """The points to mark on a plot `columns` wide spanning steps `first`..`last`: the
    newest of each stretch of `spacing` columns, so markers stay apart however many
    there are (an evaluation every 20 steps over thousands of steps filled every column)."""
    if columns <= 0 or last <= first:
        return list(points)
    kept: dict[int, tuple[float, float]] = {}
    for step, value in points:
        column = math.floor((step - first) / (last - first) * (columns - 1))
        kept[column // spacing] = (step, value)
    return [kept[stretch] for stretch in sorted(kept)]


def y_limits(values: Sequence[float], min_span: float = 0.0) -> tuple[float, float]:
    """A y range holding `values` with a little room, never thinner than `min_span` (nor
    than a tenth of the values' size, so a constant series sits in the middle)."""
    if not values:
        return 0.0, 1.0
    low, high = min(values), max(values)
    middle = (high + low) / 2
    span = max(high - low, min_span, abs(middle) * 0.1)
    if span < 1e-12:  # a constant zero: a unit range around it
        span = 1.0
    if high - low < span:
        low, high = middle - span / 2, middle + span / 2
    pad = span * 0.05
    return low - pad, high + pad


def scientific(value: float, digits: int = 1) -> str:
    """`value` in scientific notation without the exponent's padding: 1.2e-3, -2.50e5."""
    mantissa, exponent = f"{value:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def format_value(value: float) -> str:
    """A metric value in at most about seven characters: 0.874, 1.2e-3, 1234, 12.3k."""
    if not math.isfinite(value):
        return str(value)
    size = abs(value)
    if size != 0 and (size < 1e-3 or size >= 1e6):
        return scientific(value)
    if size >= 10_000:
        return f"{value / 1000:.1f}k"
    if size >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}" if size < 1 else f"{value:.3f}".rstrip("0").rstrip(".")


def next_nice_interval(interval: float) -> float:
    """The next tick interval after `interval` in 1, 2, 5, 10, 20, 50, ..."""
    power = 10 ** math.floor(math.log10(interval) + 1e-9)
    mantissa = round(interval / power)
    return (2 if mantissa < 2 else 5 if mantissa < 5 else 10) * power


class CompactAxisFormatter(NumericAxisFormatter):
    """Tick labels that fit the chart's margin (8 characters): scientific notation for tiny
    or huge values (a learning rate of 1e-3, token counts in the millions), with the
    fewest digits that tell the ticks apart (1.0e-3 1.5e-3, but 1.01e-3 1.02e-3).
    No two ticks share a row (`rows`: the plot's height), since one label would be drawn
    over the other: a flat 1.0 would sit on a row labelled 1.02."""

    def __init__(self, rows: Callable[[], int] = lambda: 0) -> None:
        self.rows = rows  # read when the ticks are drawn, so it is the plot's height then
        #: The values are log10s (a log scale): ticks are labelled with 10**tick.
        self.log = False

    def get_ticks(self, min_: float, max_: float, max_ticks: int = 8) -> list[float]:
        if self.log:
            ticks = self._log_ticks(min_, max_, max_ticks)
            if len(ticks) >= 2:
                return ticks
        ticks = super().get_ticks(min_, max_, max_ticks)
        if self.rows() <= 0 or len(ticks) < 2 or max_ <= min_:
            return ticks
        interval = ticks[1] - ticks[0]
        while self._share_a_row(ticks, min_, max_):
            interval = next_nice_interval(interval)
            first, last = math.ceil(min_ / interval - 1e-9), math.floor(max_ / interval + 1e-9)
            ticks = [round(k * interval, 12) for k in range(first, last + 1)]
        return ticks

    def _log_ticks(self, min_: float, max_: float, max_ticks: int) -> list[float]:
        """On a log scale: ticks (their log10s) at powers of ten, else at 1, 2, 5 times
        them, else at 1, 1.5, 2, 3, 5, 7 times them: the first with three ticks that do not
        crowd, else the most that fit; [] when fewer than two fit."""
        if max_ <= min_:
            return []
        powers = range(math.floor(min_) - 1, math.ceil(max_) + 1)
        best: list[float] = []
        for mantissas in ((1,), (1, 2, 5), (1, 1.5, 2, 3, 5, 7)):
            ticks = [
                t
                for t in (math.log10(m) + k for k in powers for m in mantissas)
                if min_ <= t <= max_
            ]
            if len(ticks) > max_ticks or (
                self.rows() > 0 and len(ticks) >= 2 and self._share_a_row(ticks, min_, max_)
            ):
                break
            best = ticks
            if len(ticks) >= 3:
                break
        return best if len(best) >= 2 else []

    def _share_a_row(self, ticks: Sequence[float], min_: float, max_: float) -> bool:
        """Whether two ticks land in one row, placed as textual-plot places them (a row
        per `rows`, the lowest value one row further down)."""
        height = self.rows()
        rows = [
            math.ceil(height - (tick - min_) / (max_ - min_) * height) + (tick == min_)
            for tick in ticks
            if min_ <= tick <= max_
        ]
        return len(set(rows)) < len(rows)

    def get_labels_for_ticks(self, ticks: Sequence[float]) -> list[str]:
        if self.log:
            return [format_value(float(f"{10**tick:.3g}")) for tick in ticks]
        biggest = max((abs(t) for t in ticks), default=0.0)
        if biggest and (biggest < 0.01 or biggest >= 1e5):
            for digits in (1, 2, 3):
                labels = [scientific(t, digits) if t else "0" for t in ticks]
                if len(set(labels)) == len(labels):
                    break
            return labels
        # a tick a rounding error below zero reads "-0.0": a zero is a zero
        return [
            label.lstrip("-") if float(label) == 0 else label
            for label in super().get_labels_for_ticks(ticks)
        ]


class StepAxisFormatter(NumericAxisFormatter):
    """Ticks at whole steps only (two steps span 1 to 2, not 1.0, 1.2, ... 2.0), no closer
    than the plot's width (`columns`) can label them apart: a narrow chart of 8 steps reads
    2 4 6 8, not 1 2 3 45 6 7 8."""

    def __init__(self, columns: Callable[[], int] = lambda: 0) -> None:
        self.columns = columns  # read when the ticks are drawn, so it is the plot's width then

    def get_ticks(self, min_: float, max_: float, max_ticks: int = 8) -> list[float]:
        ticks = super().get_ticks(min_, max_, max_ticks)
        interval: float = max(1, round(ticks[1] - ticks[0])) if len(ticks) >= 2 else 1
        while True:
            ticks = [
                float(k * interval)
                for k in range(math.ceil(min_ / interval), math.floor(max_ / interval) + 1)
            ]
            if not self._crowded(ticks, min_, max_):
                return ticks
            interval = next_nice_interval(interval)

    def _crowded(self, ticks: Sequence[float], min_: float, max_: float) -> bool:
        """Whether two labels would run together (a column apart at least)."""
        width = self.columns()
        if width <= 0 or len(ticks) < 2 or max_ <= min_:
            return False
        room = max(len(label) for label in self.get_labels_for_ticks(ticks)) + 1
        at = [math.floor((tick - min_) / (max_ - min_) * width) for tick in ticks]
        return any(b - a < room for a, b in zip(at, at[1:], strict=False))

    def get_labels_for_ticks(self, ticks: Sequence[float]) -> list[str]:
        return [f"{tick:.0f}" for tick in ticks]


class StepChart(PlotWidget, inherit_bindings=False):
    """Line chart of `state.series[key]`: values, EMA (when smoothing is on), markers.

    Focusable (so `+` can maximize it) but without pan/zoom (nor their keys): it is a live
    view. Colours come from the component classes below, so they follow the theme.

    Args:
        key: The metric to draw (`reward/mean`, `loss`, `task/<name>`, ...).
        title: The border title (default: the key).
    """

    ALLOW_MAXIMIZE = True

    COMPONENT_CLASSES = PlotWidget.COMPONENT_CLASSES | {
        "step-chart--value",
        "step-chart--ema",
        "step-chart--eval",
        "step-chart--checkpoint",
        "step-chart--knob",
    }

    #: The thinnest y range drawn (rewards: 0.1, so a flat reward does not look noisy).
    min_span = 0.0

    def __init__(
        self,
        key: str,
        *,
        title: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes, allow_pan_and_zoom=False)
        self.key = key
        self.title = title or key
        self._drawn: tuple[object, ...] | None = None
        self._ema: tuple[int, float, list[float]] = (-1, -1.0, [])
        self._subtitle_key: tuple[object, ...] | None = None
        self._plot_size = (0, 0)
        self._formatted: tuple[str, bool] | None = None
        self.y_axis = CompactAxisFormatter(rows=self._plot_rows)
        #: The view's chart options (x axis, log scale, steps shown); None: by step, all.
        self.options: ChartOptions | None = None

    def on_mount(self) -> None:
        self.border_title = self.title
        self.margin_top = 0
        self.margin_bottom = 1
        self.margin_left = 9
        self.set_y_formatter(self.y_axis)
        self._set_formatters(self.chart_options)

    def on_resize(self) -> None:
        self._drawn = None  # marker density depends on the size
        self._fit_labels()

    def _fit_labels(self) -> None:
        """The step labels under the plot give way before the plot drops below its
        minimum (at 60x18 the reward chart had its axes and labels, and no room for a
        line). Checked on every redraw too: the first resize can come before the mount."""
        height = self.content_size.height
        labels = 1 if height == 0 or height >= MIN_PLOT_ROWS + 3 else 0
        if self.margin_bottom != labels:
            self.margin_bottom = labels
            self._drawn = None

    def _plot_columns(self) -> int:
        """The plot's width in columns: its canvas less the two axis lines."""
        return max(0, self.query_one("#plot").size.width - 2) if self.is_mounted else 0

    def _plot_rows(self) -> int:
        """The plot's height in rows: its canvas less the two axis lines."""
        return max(0, self.query_one("#plot").size.height - 2) if self.is_mounted else 0

    # ------------------------------------------------------------------ data
    def points(self, state: DashboardState) -> Points:
        return state.series.get(self.key, ())

    def extra_points(self, state: DashboardState) -> Points:
        """Points marked ◆ over the lines (the reward chart's evaluations), thinned
        (`thin_markers`) so that they never hide the line."""
        return ()

    def ema(self, state: DashboardState, values: Sequence[float]) -> list[float]:
        count, beta, cached = self._ema
        if count != len(values) or beta != state.ema_beta:
            cached = debiased_ema(values, state.ema_beta) if state.ema_beta > 0 else []
            self._ema = (len(values), state.ema_beta, cached)
        return cached

    # ------------------------------------------------------------------ drawing
    def _style(self, component: str) -> str:
        return str(self.get_component_rich_style(component))

    def swatch(self, component: str, glyph: str = "━") -> str:
        """A glyph in a component's colour, as markup for the border subtitle."""
        color = self.get_component_rich_style(component).color
        if color is None:
            return glyph
        r, g, b = color.get_truecolor()
        return f"[#{r:02x}{g:02x}{b:02x}]{glyph}[/]"

    def empty_text(self, state: DashboardState) -> str:
        return "no steps yet"

    def subtitle_text(self, state: DashboardState) -> str:
        points = self.points(state)
        if not points:
            return self.empty_text(state)
        parts = [f"{self.swatch('step-chart--value')} {format_value(points[-1][1])}"]
        ema = self.ema(state, [v for _, v in points])
        if ema:
            parts.append(f"{self.swatch('step-chart--ema')} ema {format_value(ema[-1])}")
        return "  ".join(parts)

    def draw_key(self, state: DashboardState) -> tuple[object, ...]:
        """Changes whenever the chart would draw differently."""
        points = self.points(state)
        return (
            len(points),
            points[-1] if points else None,
            state.ema_beta,
            len(self.extra_points(state)),
            len(state.checkpoints),
            len(state.knob_markers()),
            self.size,
            self.chart_options.key(),
        )

    @property
    def chart_options(self) -> ChartOptions:
        return self.options if self.options is not None else ChartOptions()

    def update_from_state(self, state: DashboardState, now: float) -> None:
        self._fit_labels()
        plot_size = (self._plot_columns(), self._plot_rows())
        if plot_size != self._plot_size:
            # the plot's canvas changed size without the chart (the step labels gave way):
            # textual-plot resizes its canvases only on a layout refresh of the chart
            self._plot_size = plot_size
            self.refresh(layout=True)
        key = self.draw_key(state) + (plot_size,)
        subtitle_key = key[:-3] + (key[-2], state.phase_text())
        if subtitle_key != self._subtitle_key:
            self._subtitle_key = subtitle_key
            set_subtitle(self, self.subtitle_text(state))
        if key == self._drawn:
            return
        self._drawn = key
        self.clear()
        points = self.points(state)
        if not points:
            return
        options = self.chart_options
        ema = self.ema(state, [value for _, value in points])
        lines: list[Line] = []
        if ema:
            lines.append(
                Line(
                    *chart_points(
                        state, [(s, e) for (s, _), e in zip(points, ema, strict=True)], options
                    ),
                    self._style("step-chart--ema"),
                )
            )
        lines.append(Line(*chart_points(state, points, options), self._style("step-chart--value")))
        extra = Line(
            *chart_points(state, self.extra_points(state), options, last_step=points[-1][0]),
            self._style("step-chart--eval"),
        )
        window = step_window(points[-1][0], options)
        marks = []
        for component, steps in (
            # full state only: sampler weights are saved per policy version, not per step
            (
                "step-chart--checkpoint",
                sorted({c.step for c in state.checkpoints if c.kind == "state"}),
            ),
            ("step-chart--knob", sorted({c.step for c in state.knob_markers()})),
        ):
            xs = [
                x_of(state, m, options.x_axis)
                for m in steps
                if window is None or window[0] <= m <= window[1]
            ]
            marks.append((self._style(component), [x for x in xs if x is not None]))
        self.draw(lines, extra=extra, marks=marks)

    def draw(
        self,
        lines: Sequence[Line],
        *,
        extra: Line | None = None,
        marks: Sequence[tuple[str, Sequence[float]]] = (),
    ) -> None:
        """Draw `lines` (already on the chart's axes, `chart_options`), the points of
        `extra` as ◆ over them, and a dotted rule at each x of `marks` (style, xs)."""
        options = self.chart_options
        self._set_formatters(options)
        every_x = [x for line in lines for x in line.xs] + (list(extra.xs) if extra else [])
        every_y = [y for line in lines for y in line.ys] + (list(extra.ys) if extra else [])
        if not every_x:
            return
        low, high = y_limits(every_y, 0.0 if options.log_y else self.min_span)
        first, last = min(every_x), max(every_x)
        self.set_xlimits(first, max(last, first + 1))
        self.set_ylimits(low, high)
        # markers first, so the lines draw over them: a dotted rule (┊) per text row, which
        # no braille line looks like (a braille column of dots read as data in small charts),
        # thinned as the ◆ are: one every few columns at most
        rows = max(1, self._plot_rows())
        ys = [low + (high - low) * (i + 0.5) / rows for i in range(rows)]
        span = max(last, first + 1)
        for style, xs in marks:
            shown = [
                x
                for x, _ in thin_markers(
                    [(x, 0.0) for x in xs if first <= x <= last], first, span, self._plot_columns()
                )
            ]
            if shown:
                self.scatter(
                    [x for x in shown for _ in ys], ys * len(shown), marker="┊", marker_style=style
                )
        for line in lines:
            if not line.xs:
                continue
            self.plot(line.xs, line.ys, line_style=line.style, hires_mode=HiResMode.BRAILLE)
            if len(line.xs) == 1:  # a line needs two points: show the first one as a dot
                self.scatter(line.xs, line.ys, marker="•", marker_style=line.style)
        if extra is not None and extra.xs:  # over the lines, never closer than MARKER_SPACING
            marks_at = thin_markers(
                list(zip(extra.xs, extra.ys, strict=True)), first, span, self._plot_columns()
            )
            self.scatter(
                [x for x, _ in marks_at],
                [y for _, y in marks_at],
                marker="◆",
                marker_style=extra.style,
            )

    def _set_formatters(self, options: ChartOptions) -> None:
        """The axes' tick labels for the options' x axis and y scale."""
        if (options.x_axis, options.log_y) == self._formatted:
            return
        self._formatted = (options.x_axis, options.log_y)
        self.y_axis.log = options.log_y
        self.set_x_formatter(X_FORMATTERS[options.x_axis](columns=self._plot_columns))


class Line(NamedTuple):
    """A line as drawn: its points on the chart's axes and its style."""

    xs: Sequence[float]
    ys: Sequence[float]
    style: str


class ElapsedAxisFormatter(StepAxisFormatter):
    """Whole seconds, labelled as time since the run started: 45s, 2m30, 1h05."""

    def get_labels_for_ticks(self, ticks: Sequence[float]) -> list[str]:
        return [short_duration(tick) for tick in ticks]


class TokensAxisFormatter(StepAxisFormatter):
    """Whole tokens, labelled short: 800, 12.5k, 3.2e6."""

    def get_labels_for_ticks(self, ticks: Sequence[float]) -> list[str]:
        return [format_value(tick) for tick in ticks]


def short_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}"


X_FORMATTERS: dict[str, type[StepAxisFormatter]] = {
    "step": StepAxisFormatter,
    "elapsed": ElapsedAxisFormatter,
    "tokens": TokensAxisFormatter,
}
