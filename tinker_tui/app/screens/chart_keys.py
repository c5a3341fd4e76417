"""The chart controls of a view of metric charts (the metrics view, the comparison): `x`
the x axis (step, time, tokens trained), `l` a log scale, `z` zoom to the last N steps,
`r` a range of steps typed in. What they change is the view's `ChartOptions`."""

from __future__ import annotations

from textual.binding import Binding
from textual.screen import Screen

from tinker_tui.app.chart_options import X_AXIS_WORDS, ChartOptions, parse_step_range

CHART_BINDINGS = [
    Binding("x", "cycle_x_axis", "X axis", id="chart_x_axis"),
    Binding("l", "toggle_log", "Log y", id="chart_log"),
    Binding("z", "cycle_zoom", "Zoom", id="chart_zoom"),
    Binding("r", "step_range", "Steps", show=False, id="chart_range"),
]


class ChartKeys(Screen[None]):
    """A screen of charts that share `chart_options` (add `CHART_BINDINGS` to its keys);
    `charts_changed` redraws them."""

    chart_options: ChartOptions

    def charts_changed(self) -> None:
        raise NotImplementedError

    def action_cycle_x_axis(self) -> None:
        axis = self.chart_options.cycle_x_axis()
        self.charts_changed()
        self.notify(f"x axis: {X_AXIS_WORDS[axis]}", timeout=1.5)

    def action_toggle_log(self) -> None:
        self.chart_options.log_y = not self.chart_options.log_y
        self.charts_changed()
        self.notify(
            "log scale (values above 0)" if self.chart_options.log_y else "linear scale",
            timeout=1.5,
        )

    def action_cycle_zoom(self) -> None:
        self.chart_options.cycle_zoom()
        self.charts_changed()
        last = self.chart_options.last_steps
        self.notify(f"the last {last} steps" if last else "every step", timeout=1.5)

    def action_step_range(self) -> None:
        from tinker_tui.app.screens.text_prompt import TextPromptScreen

        def check(text: str) -> str | None:
            if not text.strip():
                return None  # empty: every step again
            try:
                parse_step_range(text)
            except ValueError as exc:
                return str(exc)
            return None

        def chosen(text: str | None) -> None:
            if text is None:
                return
            self.chart_options.step_range = parse_step_range(text) if text.strip() else None
            self.chart_options.last_steps = None
            self.charts_changed()

        current = self.chart_options.step_range
        self.app.push_screen(
            TextPromptScreen(
                "Steps to show",
                f"{current[0]}-{current[1]}" if current else "",
                hint="FROM-TO, e.g. 10-50; empty: all",
                check=check,
                placeholder="10-50",
            ),
            chosen,
        )
