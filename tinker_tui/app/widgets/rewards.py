"""Mean reward per training step with its debiased EMA, evaluation points (◆), and markers
where checkpoints were saved and knobs changed: the dashboard's chart."""

from __future__ import annotations

from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.widgets.step_chart import Points, StepChart, y_limits
from tinker_tui.engine.metrics import metric_keys as keys

__all__ = ["RewardsChart", "y_limits"]


class RewardsChart(StepChart):
    """`reward/mean` per step, its EMA at the current smoothing (`s`), `eval/reward_mean`
    points (◆), and dotted markers: checkpoints, knob changes."""

    min_span = 0.1

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(keys.REWARD_MEAN, title="Reward", id=id, classes=classes)

    def points(self, state: DashboardState) -> Points:
        return state.rewards

    def extra_points(self, state: DashboardState) -> Points:
        return [(p.step, p.reward) for p in state.evals]

    def empty_text(self, state: DashboardState) -> str:
        phase = state.phase_text()
        return f"no steps yet: {phase}" if phase else "no steps yet · s: smoothing"

    def subtitle_text(self, state: DashboardState) -> str:
        last = state.last_reward
        if last is None:
            return self.empty_text(state)
        parts = [f"{self.swatch('step-chart--value')} mean {last:.3f}"]
        ema = self.ema(state, [v for _, v in state.rewards])
        if ema:
            parts.append(f"{self.swatch('step-chart--ema')} ema({state.ema_beta:g}) {ema[-1]:.3f}")
        else:
            parts.append("no smoothing")
        if state.last_eval is not None:
            parts.append(
                f"{self.swatch('step-chart--eval', '◆')} eval {state.last_eval.reward:.3f}"
            )
        if state.checkpoints:
            parts.append(f"{self.swatch('step-chart--checkpoint', '┊')} ckpt")
        if state.knob_markers():
            parts.append(f"{self.swatch('step-chart--knob', '┊')} knob")
        return "  ".join(parts)
