"""Mean reward per training step, with its debiased EMA, as a braille line chart."""

from __future__ import annotations

from textual_plot import HiResMode, PlotWidget

from app.run_model import RunModel


class RewardsChart(PlotWidget, can_focus=False):
    """Line chart of `reward/mean` per step (and its EMA); axes show step and reward.

    Not focusable and without pan/zoom: it is a live view that follows the newest step.
    Line colours come from the component classes below, so they follow the theme.
    """

    COMPONENT_CLASSES = PlotWidget.COMPONENT_CLASSES | {
        "rewards-chart--mean",
        "rewards-chart--ema",
    }

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, allow_pan_and_zoom=False)
        self._drawn_points = -1

    def on_mount(self) -> None:
        self.border_title = "Reward"
        self.margin_top = 0
        self.margin_bottom = 1
        self.margin_left = 7

    def _swatch(self, component: str) -> str:
        """A short line in a component's colour, as markup for the border subtitle."""
        color = self.get_component_rich_style(component).color
        if color is None:
            return "━"
        r, g, b = color.get_truecolor()
        return f"[#{r:02x}{g:02x}{b:02x}]━[/]"

    def update_from_model(self, model: RunModel, now: float) -> None:
        last = model.last_reward
        if last is None:
            self.border_subtitle = "no steps yet"
        else:
            self.border_subtitle = (
                f"{self._swatch('rewards-chart--mean')} mean {last:.3f}  "
                f"{self._swatch('rewards-chart--ema')} ema {model.last_reward_ema:.3f}"
            )
        if len(model.rewards) == self._drawn_points:
            return
        self._drawn_points = len(model.rewards)
        self.clear()
        if not model.rewards:
            return
        steps = [step for step, _ in model.rewards]
        values = [value for _, value in model.rewards]
        self.plot(
            steps,
            model.reward_ema,
            line_style=str(self.get_component_rich_style("rewards-chart--ema")),
            hires_mode=HiResMode.BRAILLE,
        )
        self.plot(
            steps,
            values,
            line_style=str(self.get_component_rich_style("rewards-chart--mean")),
            hires_mode=HiResMode.BRAILLE,
        )
