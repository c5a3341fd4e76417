"""The evaluator: the task's eval scenarios rolled out on the current policy, beside training.

An evaluation never blocks the trainer (it runs as its own task, its rollouts on the
rollout loop as a group's are) and only one runs at a time: a request made during one
stays pending and starts when it ends. The pipeline decides when one is due (a request,
`eval_every`, `eval_at_start`, the final step) and owns the rollouts; this object keeps
the evaluation's own state and publishes `EvalCompleted`, with the protocol it sampled
under (`engine.training.eval_protocol`, from the run's `eval_*` settings: k samples per
scenario, its temperature and max_tokens pinned or the run's defaults, its renderer) and the
same statistics as `tinker-tui eval` (`engine.metrics.eval_stats`: the mean's bootstrap
interval, pass@1 and pass@k at the success threshold). Its rollouts sample with the
protocol's settings (`EvalProtocol.sampling_defaults`, per rollout), as `tinker-tui eval`'s
do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from tinker_tui.engine.clock import Clock
from tinker_tui.engine.events import EvalCompleted, EventBus, LogEmitted, TrajectorySummary
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics.eval_stats import summarize
from tinker_tui.engine.rollouts.task import Scenario, Task, part_of
from tinker_tui.engine.rollouts.task_metrics import eval_task_metrics
from tinker_tui.engine.rollouts.trajectory import Trajectory
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.training.eval_protocol import EvalProtocol
from tinker_tui.engine.training.rollout_loop import RolloutLoop

#: Rolls out scenarios with a client, one rollout each, together, on the rollout loop (the
#: pipeline's, so a rollout is checked and bounded by `rollout_timeout` the same way in both),
#: each rollout's requests with the given sampling defaults.
RollOut = Callable[
    [object, list[Scenario], SamplingDefaults],
    Coroutine[Any, Any, tuple[list[Trajectory | BaseException], tuple[TrajectorySummary, ...]]],
]


class Evaluator:
    def __init__(
        self,
        *,
        task: Task,
        client_factory: Callable[[], object],
        rollouts: RolloutLoop,
        roll_out: RollOut,
        bus: EventBus,
        clock: Clock,
        now_at: Callable[[], tuple[int, int]],
        stopping: Callable[[], bool],
        protocol: Callable[[], EvalProtocol] = EvalProtocol,
    ) -> None:
        self.task = task
        self.rollouts = rollouts
        self.bus = bus
        self.clock = clock
        self._client_factory = client_factory
        self._roll_out = roll_out
        self._now_at = now_at  # (step, policy version) now
        self._stopping = stopping
        #: The protocol an evaluation starting now samples under.
        self._protocol = protocol
        self.requested = False
        self.task_running: asyncio.Task[None] | None = None  # the latest one, done or not
        self.last_step: int | None = None  # the step the latest evaluation started at

    @property
    def has_scenarios(self) -> bool:
        return self.task.eval_scenarios is not None

    def running(self) -> asyncio.Task[None] | None:
        """The evaluation in progress, if one is."""
        task = self.task_running
        return task if task is not None and not task.done() else None

    def ask(self) -> None:
        """An evaluation is due (if the task has eval scenarios); `start_if_due` starts it."""
        self.requested = self.has_scenarios

    def start_if_due(self) -> None:
        """Evaluate alongside training (never blocking it); one evaluation at a time."""
        if not self.requested or self._stopping():
            return
        if self.running() is not None:
            return  # the request stays pending and runs after the current evaluation
        self.requested = False
        # Stamped now: the task starts a loop turn later, often after the next step
        # (`eval_every` 20 read 21, 42, ...).
        step, version = self._now_at()
        self.task_running = asyncio.create_task(self.evaluate(step, version), name="evaluator")

    async def final(self) -> None:
        """Evaluate the final policy, once (unless an evaluation of this step already ran or
        is running). One of an older step still running is finished first, not dropped: a
        short run ended before its `eval_at_start` baseline, which it exists to be compared
        with. The pipeline has stopped its rollouts first."""
        step, version = self._now_at()
        running = self.running()
        if running is not None:
            await asyncio.gather(running, return_exceptions=True)
        if self.last_step == step:
            return
        self._log("info", f"final evaluation at step {step}")
        await self.evaluate(step, version)

    async def evaluate(self, step: int, version: int) -> None:
        """Evaluate the policy of `step` (version `version`, the newest when it began)."""
        assert self.task.eval_scenarios is not None
        self.last_step = step
        client = self._client_factory()
        protocol = self._protocol()
        scenarios = list(self.task.eval_scenarios())
        # k samples of each scenario, side by side: sample j of scenario i is at i * k + j
        samples = [s for s in scenarios for _ in range(protocol.k)]
        results, summaries = await self.rollouts.run(
            self._roll_out(client, samples, protocol.sampling_defaults())
        )
        rewards = [r.reward for r in results if isinstance(r, Trajectory)]
        errors = len(results) - len(rewards)
        metrics = {
            keys.EVAL_REWARD_MEAN: sum(rewards) / len(rewards) if rewards else float("nan"),
            keys.EVAL_NUM_SCENARIOS: float(len(scenarios)),
            keys.EVAL_ERRORS: float(errors),
        }
        per_scenario: dict[str, list[float]] = {}
        for index, (s, r) in enumerate(zip(samples, results, strict=True)):
            if isinstance(r, Trajectory):
                per_scenario.setdefault(f"{index // protocol.k}:{s.id}", []).append(r.reward)
        summary = summarize(per_scenario, k=protocol.k, threshold=protocol.success_threshold)
        if rewards:
            metrics[keys.EVAL_REWARD_LOW] = summary.mean.low
            metrics[keys.EVAL_REWARD_HIGH] = summary.mean.high
            metrics[keys.EVAL_PASS_AT_1] = summary.pass_at_1.value
            if protocol.k > 1:
                metrics[keys.EVAL_PASS_AT_K] = summary.pass_at_k.value
        metrics.update(
            eval_task_metrics(
                [(part_of(self.task, s)[0], r) for s, r in zip(samples, results, strict=True)]
            )
        )
        scenario_ids = tuple(
            s.id for s, r in zip(samples, results, strict=True) if isinstance(r, Trajectory)
        )
        self.bus.publish(
            EvalCompleted(
                time=self.clock.now(),
                step=step,
                policy_version=version,
                metrics=metrics,
                trajectories=summaries,
                scenario_ids=scenario_ids,
                protocol=protocol.as_dict(),
            )
        )
        self._log(
            "info",
            f"eval at step {step}: mean reward {metrics[keys.EVAL_REWARD_MEAN]:.3f} "
            f"over {len(rewards)} "
            + (f"samples of {len(scenarios)} scenarios" if protocol.k > 1 else "scenarios")
            + (f", {errors} errors" if errors else ""),
        )
        # A request made meanwhile starts once this task is done: called from inside it,
        # `start_if_due` saw it running and left the request for the next step (never, while
        # the run is paused).
        asyncio.get_running_loop().call_soon(self.start_if_due)

    def _log(self, level: str, message: str) -> None:
        self.bus.publish(LogEmitted(time=self.clock.now(), level=level, message=message))
