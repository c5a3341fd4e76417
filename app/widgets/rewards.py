"""Mean reward per training step with its debiased EMA, evaluation points, and markers
where checkpoints were saved and knobs changed, as a braille line chart."""

from __future__ import annotations

from textual_plot import HiResMode, PlotWidget
from tinker_tui.app.run_model import RunModel
from tinker_tui.app.widgets.updates import set_subtitle


def y_limits(values: list[float]) -> tuple[float, float]:
    """A y range holding `values` with a little room, never thinner than 0.1."""
    if not values:
        return 0.0, 1.0
    low, high = min(values), max(values)
    pad = max(0.05, (high - low) * 0.05)
    if high - low < 0.1:
        middle = (high + low) / 2
        low, high = middle - 0.05, middle + 0.05
    return low - pad, high + pad


class RewardsChart(PlotWidget):
    """Line chart of `reward/mean` per step, its EMA at the current smoothing (`s`),
    `eval/reward_mean` points (◆), and dotted markers: checkpoints, knob changes.

    Focusable (so `+` can maximize it) but without pan/zoom: it is a live view.
    Colours come from the component classes below, so they follow the theme.
    """

    ALLOW_MAXIMIZE = True

    COMPONENT_CLASSES = PlotWidget.COMPONENT_CLASSES | {
        "rewards-chart--mean",
        "rewards-chart--ema",
        "rewards-chart--eval",
        "rewards-chart--checkpoint",
        "rewards-chart--knob",
    }

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, allow_pan_and_zoom=False)
        self._drawn: tuple[object, ...] | None = None

    def on_mount(self) -> None:
        self.border_title = "Reward"
        self.margin_top = 0
        self.margin_bottom = 1
        self.margin_left = 7

    def on_resize(self) -> None:
        self._drawn = None  # marker density depends on the height

    def _style(self, component: str) -> str:
        return str(self.get_component_rich_style(component))

    def _swatch(self, component: str, glyph: str = "━") -> str:
        """A glyph in a component's colour, as markup for the border subtitle."""
        color = self.get_component_rich_style(component).color
        if color is None:
            return glyph
        r, g, b = color.get_truecolor()
        return f"[#{r:02x}{g:02x}{b:02x}]{glyph}[/]"

    def subtitle(self, model: RunModel) -> str:
        key = (len(model.rewards), model.ema_beta, len(model.evals), len(model.checkpoints),
               len(model.commands))
        if getattr(self, "_subtitle_key", None) == key:
            return self._subtitle
        self._subtitle_key = key
        self._subtitle = self._make_subtitle(model)
        return self._subtitle

    def _make_subtitle(self, model: RunModel) -> str:
        last = model.last_reward
        if last is None:
            return "no steps yet · s: smoothing"
        parts = [f"{self._swatch('rewards-chart--mean')} mean {last:.3f}"]
        if model.ema_beta > 0 and model.last_reward_ema is not None:
            parts.append(f"{self._swatch('rewards-chart--ema')} ema({model.ema_beta:g}) "
                         f"{model.last_reward_ema:.3f}")
        else:
            parts.append("no smoothing")
        if model.last_eval is not None:
            parts.append(f"{self._swatch('rewards-chart--eval', '◆')} eval "
                         f"{model.last_eval.reward:.3f}")
        if model.checkpoints:
            parts.append(f"{self._swatch('rewards-chart--checkpoint', '┊')} ckpt")
        if model.knob_markers():
            parts.append(f"{self._swatch('rewards-chart--knob', '┊')} knob")
        return "  ".join(parts)

    def update_from_model(self, model: RunModel, now: float) -> None:
        set_subtitle(self, self.subtitle(model))
        knobs = model.knob_markers()
        key = (len(model.rewards), model.ema_beta, len(model.evals), len(model.checkpoints),
               len(knobs), self.size)
        if key == self._drawn:
            return
        self._drawn = key
        self.clear()
        if not model.rewards:
            return
        steps = [step for step, _ in model.rewards]
        values = [value for _, value in model.rewards]
        ema = model.reward_ema if model.ema_beta > 0 else []
        evals = [(p.step, p.reward) for p in model.evals]
        low, high = y_limits(values + ema + [r for _, r in evals])
        first = min([steps[0]] + [s for s, _ in evals])
        last = max([steps[-1]] + [s for s, _ in evals])
        self.set_xlimits(first, max(last, first + 1))
        self.set_ylimits(low, high)
        # markers first, so the reward lines draw over them
        dots = max(16, (self.size.height or 8) * 4)
        ys = [low + (high - low) * (i + 0.5) / dots for i in range(dots)]
        for component, marks in (
            ("rewards-chart--checkpoint", sorted({c.step for c in model.checkpoints})),
            ("rewards-chart--knob", sorted({c.step for c in knobs})),
        ):
            marks = [m for m in marks if first <= m <= last]
            if marks:
                self.scatter([m for m in marks for _ in ys], ys * len(marks),
                             marker_style=self._style(component), hires_mode=HiResMode.BRAILLE)
        if ema:
            self.plot(steps, ema, line_style=self._style("rewards-chart--ema"),
                      hires_mode=HiResMode.BRAILLE)
        self.plot(steps, values, line_style=self._style("rewards-chart--mean"),
                  hires_mode=HiResMode.BRAILLE)
        if len(steps) == 1:  # a line needs two points: show the first one as a dot
            self.scatter(steps, values, marker="•",
                         marker_style=self._style("rewards-chart--mean"))
        if evals:
            self.scatter([s for s, _ in evals], [r for _, r in evals], marker="◆",
                         marker_style=self._style("rewards-chart--eval"))
