"""The headless reporter: one plain line per step, for CI, pipes and `--no-ui`."""

from __future__ import annotations

import sys
from typing import TextIO

from engine.events import (
    CheckpointSaved,
    Event,
    LogEmitted,
    RunFinished,
    RunStarted,
    RunStateChanged,
    StepTrained,
)


class HeadlessReporter:
    """Prints what a person watching a log needs; subscribe `handle` to the event bus."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.max_steps = 0
        self.discarded = {"stale": 0, "zero_variance": 0, "error": 0}
        self.started_at: float | None = None

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def handle(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.max_steps = event.max_steps
            self.started_at = event.time
            self._print(f"run {event.run_id}: task {event.name}, {event.backend} backend, "
                        f"base model {event.base_model}, {event.max_steps} steps")
        elif isinstance(event, StepTrained):
            m = event.metrics
            for reason in self.discarded:
                self.discarded[reason] += int(m.get(f"discarded/{reason}", 0))
            d = self.discarded
            elapsed = event.time - self.started_at if self.started_at is not None else 0.0
            self._print(
                f"step {event.step:>4}/{self.max_steps}  "
                f"reward {m.get('reward/mean', float('nan')):.3f}  "
                f"rollouts/s {m.get('throughput/rollouts_per_s', 0.0):6.1f}  "
                f"discarded stale/zero-var/error {d['stale']}/{d['zero_variance']}/{d['error']}  "
                f"staleness {m.get('async/staleness_mean', 0.0):.2f}  "
                f"step {m.get('time/step', 0.0):.2f}s  "
                f"elapsed {elapsed:.1f}s")
        elif isinstance(event, CheckpointSaved):
            self._print(f"checkpoint {event.name} ({event.kind}) at step {event.step}: "
                        f"{event.path}")
        elif isinstance(event, RunStateChanged) and event.state in ("paused", "stopping"):
            self._print(f"{event.state}: {event.reason}")
        elif isinstance(event, LogEmitted) and event.level in ("warning", "error"):
            self._print(f"{event.level}: {event.message.splitlines()[0]}")
        elif isinstance(event, RunFinished):
            self._print(f"run {event.status} at step {event.final_step}"
                        + (f" ({event.reason})" if event.reason else ""))
