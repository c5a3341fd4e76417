"""The learning rate over a run: a linear warm-up, then a constant, linear or cosine decay.

The factor is a pure function of the step (and the run's settings), never a state that
advances: a resumed run, or one rolled back to an earlier step, continues the schedule at
its step with nothing to restore. The live `learning_rate` knob scales it (the optimizer
gets knob x factor), so a person turning the knob mid-run moves the whole remaining curve.

Shapes (the step index `s` counts from 0 for the run's first RL step; `N` = max_steps,
`W` = lr_warmup_steps):

* warm-up, s < W: (s + 1) / W (the first step trains at 1/W of the rate, not at 0, which
  would be a wasted step);
* then, with p = (s - W) / (N - W) in [0, 1): constant 1; linear 1 - p; cosine
  (1 + cos(pi p)) / 2. Both decays reach 0 at step N, which is never trained: the last
  step trains at a small positive rate (linear: 1 / (N - W)). No floor beyond that.

A run resumed with a different `--steps` follows the curve of its new max_steps from its
step on (the curve is recomputed, not remembered).
"""

from __future__ import annotations

import math

from tinker_tui.engine.config import LR_SCHEDULES


def lr_factor(schedule: str, step: int, max_steps: int, warmup_steps: int = 0) -> float:
    """The multiplier of the learning rate for the step with index `step` (0-based) of a run
    of `max_steps` steps whose first `warmup_steps` warm up linearly."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"unknown lr_schedule {schedule!r}")
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    step = max(0, step)
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    span = max_steps - max(0, warmup_steps)
    if span <= 0:  # no decay left (config refuses warm-up >= max_steps; a resume may shrink)
        return 1.0
    progress = min(1.0, (step - max(0, warmup_steps)) / span)
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))
