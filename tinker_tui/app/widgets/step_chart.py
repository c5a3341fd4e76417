"""A braille line chart of one metric per training step: the values, their debiased EMA at
the run's smoothing (`s`), and dotted markers where checkpoints were saved and knobs
changed. The reward chart on the dashboard and every chart of the metrics view are one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from textual_plot import HiResMode, PlotWidget
from textual_plot.axis_formatter import NumericAxisFormatter

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.view_maths import debiased_ema
from tinker_tui.app.widgets.updates import set_subtitle

Points = Sequence[tuple[int, float]]

#: The fewest plot rows a chart keeps: its step labels go first (`StepChart.on_resize`).
MIN_PLOT_ROWS = 3
#: The closest two markers (◆, ┊) are drawn, in columns: denser ones are thinned, so a ◆
#: drawn over the line covers at most one cell in this many.
MARKER_SPACING = 6


def thin_markers(points: Points, first: float, last: float, columns: int,
                 spacing: int = MARKER_SPACING) -> list[tuple[int, float]]:
    """The points to mark on a plot `columns` wide spanning steps `first`..`last`: the
    newest of each stretch of `spacing` columns, so markers stay apart however many
    there are (an evaluation every 20 steps over thousands of steps filled every column)."""
    if columns <= 0 or last <= first:
        return list(points)
    kept: dict[int, tuple[int, float]] = {}
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

    def get_ticks(self, min_: float, max_: float, max_ticks: int = 8) -> list[float]:
        ticks = super().get_ticks(min_, max_, max_ticks)
        if self.rows() <= 0 or len(ticks) < 2 or max_ <= min_:
            return ticks
        interval = ticks[1] - ticks[0]
        while self._share_a_row(ticks, min_, max_):
            interval = next_nice_interval(interval)
            first, last = math.ceil(min_ / interval - 1e-9), math.floor(max_ / interval + 1e-9)
            ticks = [round(k * interval, 12) for k in range(first, last + 1)]
        return ticks

    def _share_a_row(self, ticks: Sequence[float], min_: float, max_: float) -> bool:
        """Whether two ticks land in one row, placed as textual-plot places them (a row
        per `rows`, the lowest value one row further down)."""
        height = self.rows()
        rows = [math.ceil(height - (tick - min_) / (max_ - min_) * height)
                + (tick == min_) for tick in ticks if min_ <= tick <= max_]
        return len(set(rows)) < len(rows)

    def get_labels_for_ticks(self, ticks: Sequence[float]) -> list[str]:
        biggest = max((abs(t) for t in ticks), default=0.0)
        if biggest and (biggest < 0.01 or biggest >= 1e5):
            for digits in (1, 2, 3):
                labels = [scientific(t, digits) if t else "0" for t in ticks]
                if len(set(labels)) == len(labels):
                    break
            return labels
        # a tick a rounding error below zero reads "-0.0": a zero is a zero
        return [label.lstrip("-") if float(label) == 0 else label
                for label in super().get_labels_for_ticks(ticks)]


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
            ticks = [float(k * interval)
                     for k in range(math.ceil(min_ / interval), math.floor(max_ / interval) + 1)]
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
    """Line chart of `model.series[key]`: values, EMA (when smoothing is on), markers.

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

    def __init__(self, key: str, *, title: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, allow_pan_and_zoom=False)
        self.key = key
        self.title = title or key
        self._drawn: tuple[object, ...] | None = None
        self._ema: tuple[int, float, list[float]] = (-1, -1.0, [])
        self._subtitle_key: tuple[object, ...] | None = None
        self._plot_size = (0, 0)
        self.y_axis = CompactAxisFormatter(rows=self._plot_rows)

    def on_mount(self) -> None:
        self.border_title = self.title
        self.margin_top = 0
        self.margin_bottom = 1
        self.margin_left = 9
        self.set_y_formatter(self.y_axis)
        self.set_x_formatter(StepAxisFormatter(columns=self._plot_columns))

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
    def points(self, model: DashboardState) -> Points:
        return model.series.get(self.key, ())

    def extra_points(self, model: DashboardState) -> Points:
        """Points marked ◆ over the lines (the reward chart's evaluations), thinned
        (`thin_markers`) so that they never hide the line."""
        return ()

    def ema(self, model: DashboardState, values: Sequence[float]) -> list[float]:
        count, beta, cached = self._ema
        if count != len(values) or beta != model.ema_beta:
            cached = debiased_ema(values, model.ema_beta) if model.ema_beta > 0 else []
            self._ema = (len(values), model.ema_beta, cached)
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

    def empty_text(self, model: DashboardState) -> str:
        return "no steps yet"

    def subtitle_text(self, model: DashboardState) -> str:
        points = self.points(model)
        if not points:
            return self.empty_text(model)
        parts = [f"{self.swatch('step-chart--value')} {format_value(points[-1][1])}"]
        ema = self.ema(model, [v for _, v in points])
        if ema:
            parts.append(f"{self.swatch('step-chart--ema')} ema {format_value(ema[-1])}")
        return "  ".join(parts)

    def update_from_model(self, model: DashboardState, now: float) -> None:
        self._fit_labels()
        points = self.points(model)
        extra = self.extra_points(model)
        knobs = model.knob_markers()
        plot_size = (self._plot_columns(), self._plot_rows())
        if plot_size != self._plot_size:
            # the plot's canvas changed size without the chart (the step labels gave way):
            # textual-plot resizes its canvases only on a layout refresh of the chart
            self._plot_size = plot_size
            self.refresh(layout=True)
        key = (len(points), points[-1] if points else None, model.ema_beta, len(extra),
               len(model.checkpoints), len(knobs), self.size, plot_size)
        subtitle_key = key[:-1] + (model.phase_text(),)
        if subtitle_key != self._subtitle_key:
            self._subtitle_key = subtitle_key
            set_subtitle(self, self.subtitle_text(model))
        if key == self._drawn:
            return
        self._drawn = key
        self.clear()
        if not points:
            return
        steps = [step for step, _ in points]
        values = [value for _, value in points]
        ema = self.ema(model, values)
        low, high = y_limits(values + ema + [v for _, v in extra], self.min_span)
        first = min([steps[0]] + [s for s, _ in extra])
        last = max([steps[-1]] + [s for s, _ in extra])
        self.set_xlimits(first, max(last, first + 1))
        self.set_ylimits(low, high)
        # markers first, so the lines draw over them: a dotted rule (┊) per text row, which
        # no braille line looks like (a braille column of dots read as data in small charts),
        # thinned as the ◆ are: one every few columns at most
        rows = max(1, self._plot_rows())
        ys = [low + (high - low) * (i + 0.5) / rows for i in range(rows)]
        for component, marks in (
            # full state only: sampler weights are saved per policy version, not per step
            ("step-chart--checkpoint", sorted({c.step for c in model.checkpoints
                                               if c.kind == "state"})),
            ("step-chart--knob", sorted({c.step for c in knobs})),
        ):
            marks = [m for m, _ in thin_markers([(m, 0.0) for m in marks if first <= m <= last],
                                                first, max(last, first + 1),
                                                self._plot_columns())]
            if marks:
                self.scatter([m for m in marks for _ in ys], ys * len(marks), marker="┊",
                             marker_style=self._style(component))
        if ema:
            self.plot(steps, ema, line_style=self._style("step-chart--ema"),
                      hires_mode=HiResMode.BRAILLE)
        self.plot(steps, values, line_style=self._style("step-chart--value"),
                  hires_mode=HiResMode.BRAILLE)
        if len(steps) == 1:  # a line needs two points: show the first one as a dot
            self.scatter(steps, values, marker="•",
                         marker_style=self._style("step-chart--value"))
        if extra:  # over the lines, so they show, but never closer than MARKER_SPACING
            marks_at = thin_markers(extra, first, max(last, first + 1), self._plot_columns())
            self.scatter([s for s, _ in marks_at], [v for _, v in marks_at], marker="◆",
                         marker_style=self._style("step-chart--eval"))
