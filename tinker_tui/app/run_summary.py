"""What a run came to, in a few lines: the finish screen shows it and the terminal gets it
when a run ends, from the headless run and from the dashboard alike (`summary_lines` is the
one place the words are chosen).

`SummaryCollector` folds the engine's typed events (live, or read back from the store) into
a `RunSummary`. A resumed run's live events start where it resumed; its earlier steps are in
the store (`read_earlier`), so the summary still covers the whole run.
"""

from __future__ import annotations

import math
import shlex
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from tinker_tui.engine.events import (
    CheckpointDeleted,
    CheckpointSaved,
    CommandReceived,
    Event,
    GroupDiscarded,
    GroupSampled,
    LogEmitted,
    RunFinished,
    RunStarted,
    RunStateChanged,
    StalledRollout,
    StepTrained,
    ThroughputMeasured,
    TrackerReported,
)
from tinker_tui.engine.foreign import FOREIGN_BACKENDS
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics.collapse_memory import EARLIER_KINDS, fold, is_automatic_rollback
from tinker_tui.engine.metrics.health import HealthWindow
from tinker_tui.engine.metrics.list_prices import priced_as

#: Log lines kept for a failed run's summary.
LAST_LOG_LINES = 5


@dataclass(frozen=True)
class RunSummary:
    """A run as it ended (or as far as it got).

    `status` is "completed", "stopped", "failed" or "interrupted" (its process ended without
    recording its end) once the run ended, "running" before.
    `task` is how to name the task on the command line again (a built-in name, a file).
    """

    run_id: str = ""
    task: str = ""
    #: The program that trains a run watched from its folder ("cookbook"; `task` is the
    #: folder), "" for ours: its next commands are only to look again.
    foreign: str = ""
    status: str = "running"
    reason: str = ""
    #: Why it ended, typed (`StopCause`): the words and the exit code are chosen from it.
    cause: str = ""
    #: Steps that trained nothing, every group's rewards equal (`train/skipped`), of those
    #: the run holds.
    skipped_steps: int = 0
    step: int = 0
    max_steps: int = 0
    final_reward: float | None = None
    best_reward: float | None = None
    best_step: int | None = None
    #: (step, reward) of a better step a rollback undid: the health check (a collapse's
    #: reason) still measures from it, so the summary names it beside the best held.
    undone_best: tuple[int, float] | None = None
    checkpoint: str = ""  # the last full checkpoint's name (what --resume continues from)
    checkpoint_step: int | None = None
    #: Groups discarded for the task's errors (reason "error": too few rollouts left, or
    #: the advantages hook failed).
    failed_groups: int = 0
    #: Rollouts that failed (raised, timed out), and all that ended, over the steps trained
    #: (`rollouts/failed`, `rollouts/ended`).
    failed_rollouts: int = 0
    rollouts: int = 0
    db_path: Path | None = None
    last_log: tuple[str, ...] = field(default_factory=tuple)
    #: The last word of each outside tracker (W&B, TensorBoard): where its records went.
    trackers: tuple[str, ...] = field(default_factory=tuple)
    #: The engine's own output, when it ran in a process of its own.
    engine_log: Path | None = None
    #: Where the run collapsed, with its best checkpoint (`engine.metrics.health`), if it has.
    collapse: str = ""
    #: The checkpoint a rollback would go back to (the weights that sampled the best step),
    #: if the run has one: without it, resuming with `on_collapse = rollback` cannot roll back.
    rollback_to: str = ""
    #: Rollbacks the run made (each to the checkpoint of the weights that sampled its best
    #: step).
    rollbacks: tuple[str, ...] = field(default_factory=tuple)
    #: Rollbacks `on_collapse = rollback` asked for, and the most it may (`max_rollbacks`).
    automatic_rollbacks: int = 0
    max_rollbacks: int | None = None
    #: The run's budget (`max_cost_usd`; 0: none).
    max_cost_usd: float = 0.0
    #: Groups whose rollouts were stuck (in flight past the stall threshold) when the run
    #: was last measured, or when it was asked to stop.
    stalled: tuple[StalledRollout, ...] = ()
    #: The last step's running totals of tokens and dollars (`tokens/*_total`,
    #: `cost/usd_total`; the dollars only where prices are set).
    totals: Mapping[str, float] = field(default_factory=dict)
    #: " (list prices of DATE)" for a run priced from Tinker's list (`price_list_date`).
    priced_as: str = ""

    @property
    def ended(self) -> bool:
        return self.status in ("completed", "stopped", "failed", "interrupted")


class SummaryCollector:
    """Subscribe `handle` to a session's event bus; `summary()` is the run so far."""

    def __init__(self, *, task: str = "", db_path: str | Path | None = None) -> None:
        self._summary = RunSummary(task=task, db_path=Path(db_path) if db_path else None)
        self._log: deque[str] = deque(maxlen=LAST_LOG_LINES)
        self._trackers: dict[str, str] = {}
        self._stop_reason = ""  # why it was asked to stop: the engine ends it "stopped"
        self._stopping = False
        self._earlier: list[Event] = []  # `read_earlier`'s, until the run says where it starts
        self._health = HealthWindow()
        #: Each step's mean reward, (failed, ended) rollouts and whether it trained nothing,
        #: in step order: a rollback forgets the steps it undid, as the store does, so
        #: `show` reads the same summary.
        self._steps: dict[int, tuple[float | None, int, int, bool]] = {}

    async def read_earlier(self, db_path: str | Path, run_id: str) -> list[Event]:
        """Read the steps, checkpoints and rollbacks the store holds of run `run_id` before
        it starts here; its `RunStarted` then takes in those up to the step it resumes from
        (the rest are undone by the resume). Returns them with the run's start and its
        sampled groups, which the step lines' totals count from. Nothing for a run the store
        does not hold yet."""
        from tinker_tui.engine.store import StoreError, StoreReader

        if not Path(db_path).is_file():
            return []
        try:
            async with await StoreReader.open_readonly(db_path) as store:
                run = await store.run(run_id)
                if run is not None:
                    self._earlier = await store.events(
                        run, (*EARLIER_KINDS, GroupDiscarded, GroupSampled, RunStarted)
                    )
        except StoreError:  # unreadable now: the run's own start says why
            return []
        return list(self._earlier)

    def handle(self, event: Event) -> None:
        s = self._summary
        if isinstance(event, RunStarted):
            self._summary = replace(
                s,
                run_id=event.run_id,
                task=s.task or event.task_spec or task_spec_for(event.name),
                foreign=event.backend if event.backend in FOREIGN_BACKENDS else "",
                max_steps=event.max_steps,
                step=max(s.step, event.start_step),
                max_rollbacks=_int_or_none(event.config.get("max_rollbacks")),
                max_cost_usd=_float_or_zero(event.config.get("max_cost_usd")),
                priced_as=priced_as(event.config),
            )
            self._health.configure(event.config)
            earlier, self._earlier = self._earlier, []
            for before in earlier:  # first: an equal best stays at its earlier step
                if isinstance(before, RunStarted):
                    continue  # this start is the run's now
                if (
                    not isinstance(before, StepTrained | CheckpointSaved | GroupDiscarded)
                    or before.step <= event.start_step
                ):
                    self.handle(before)
            return
        elif isinstance(event, StepTrained):
            reward = event.metrics.get(keys.REWARD_MEAN)
            self._steps[event.step] = (
                float(reward) if reward is not None and math.isfinite(reward) else None,
                int(event.metrics.get(keys.ROLLOUTS_FAILED, 0)),
                int(event.metrics.get(keys.ROLLOUTS_ENDED, 0)),
                bool(event.metrics.get(keys.TRAIN_SKIPPED)),
            )
            fold(self._health, event)
            s = replace(
                s,
                step=event.step,
                failed_rollouts=s.failed_rollouts + int(event.metrics.get(keys.ROLLOUTS_FAILED, 0)),
                rollouts=s.rollouts + int(event.metrics.get(keys.ROLLOUTS_ENDED, 0)),
                skipped_steps=s.skipped_steps + bool(event.metrics.get(keys.TRAIN_SKIPPED)),
                totals={
                    k: float(event.metrics[k])
                    for k in _TOTALS
                    if isinstance(event.metrics.get(k), int | float)
                },
            )
            if reward is not None and math.isfinite(reward):
                best = s.best_reward is None or reward > s.best_reward
                s = replace(
                    s,
                    final_reward=float(reward),
                    best_reward=float(reward) if best else s.best_reward,
                    best_step=event.step if best else s.best_step,
                )
        elif isinstance(event, GroupDiscarded):
            if event.reason != "error":
                return
            s = replace(s, failed_groups=s.failed_groups + 1)
        elif isinstance(event, CheckpointSaved):
            if event.kind == "state":
                s = replace(s, checkpoint=event.name, checkpoint_step=event.step)
                fold(self._health, event)
        elif isinstance(event, CheckpointDeleted):
            fold(self._health, event)
            return
        elif isinstance(event, CommandReceived):
            if is_automatic_rollback(event):
                self._summary = replace(s, automatic_rollbacks=s.automatic_rollbacks + 1)
            if event.command != "rolled_back":
                return
            s = self._summary
            to_step = int(event.args.get("to_step", 0))
            fold(self._health, event)
            self._steps = {k: v for k, v in self._steps.items() if k <= to_step}
            s = self._with_steps(replace(s, step=to_step))
            s = replace(
                s,
                rollbacks=(
                    *s.rollbacks,
                    f"to {event.args.get('checkpoint', '?')} "
                    f"(step {to_step}) at learning rate "
                    f"{event.args.get('value', float('nan')):g}",
                ),
            )
        elif isinstance(event, TrackerReported):
            if event.level == "info":  # a failing tracker's warning is in the log already
                self._trackers[event.tracker] = event.message
            return
        elif isinstance(event, LogEmitted):
            self._log.append(event.message)
        elif isinstance(event, ThroughputMeasured):
            if not self._stopping:  # as the stop found them: a stop cancels them
                self._summary = replace(s, stalled=tuple(event.stalled))
            return
        elif isinstance(event, RunStateChanged):
            if event.state == "stopping":
                self._stopping = True
                self._stop_reason = event.reason or self._stop_reason
            return
        elif isinstance(event, RunFinished):
            reason = (
                self._stop_reason
                if event.status == "stopped" and self._stop_reason
                else event.reason
            )
            s = replace(
                s, status=event.status, reason=reason, cause=event.cause, step=event.final_step
            )
        else:
            return
        self._summary = s

    def _with_steps(self, s: RunSummary) -> RunSummary:
        """`s` with the rewards and rollout counts of the steps the run holds (after a
        rollback; each step adds its own as it comes)."""
        final: float | None = None
        best: float | None = None
        best_step: int | None = None
        for step, (reward, *_) in sorted(self._steps.items()):
            if reward is not None:
                final = reward
                if best is None or reward > best:  # an equal best stays at its earlier step
                    best, best_step = reward, step
        return replace(
            s,
            final_reward=final,
            best_reward=best,
            best_step=best_step,
            failed_rollouts=sum(f for _, f, _, _ in self._steps.values()),
            rollouts=sum(n for _, _, n, _ in self._steps.values()),
            skipped_steps=sum(k for *_, k in self._steps.values()),
        )

    def summary(self) -> RunSummary:
        collapse = self._health.collapse
        target = self._health.rollback_point()
        s = self._summary
        best = self._health.best_step  # what a collapse's words quote: the same value
        if (
            best is not None
            and self._health.best_undone
            and (s.best_reward is None or best[1] > s.best_reward)
        ):
            s = replace(s, undone_best=best)
        return replace(
            s,
            last_log=tuple(self._log),
            trackers=tuple(self._trackers.values()),
            collapse=collapse.words() if collapse is not None else "",
            rollback_to=target[1] if target else "",
        )

    def set_engine_log(self, path: Path | None) -> None:
        self._summary = replace(self._summary, engine_log=path)


def task_spec_for(name: str) -> str:
    """How to name a run's task on the command line when its store does not say
    (`RunStarted.task_spec`, kept since schema v6): a built-in's name, else TASK."""
    from tinker_tui.app.task_loader import BUILTIN_TASKS

    return "example" if name == "yes_no_maybe" else name if name in BUILTIN_TASKS else "TASK"


def db_flag(db_path: Path | None) -> str:
    from tinker_tui.app.commands.common import DEFAULT_DB

    if db_path is None or Path(db_path) == DEFAULT_DB:
        return ""
    return f" --db {shlex.quote(str(db_path))}"


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_TOTALS = (
    keys.TOKENS_PREFILL_TOTAL,
    keys.TOKENS_PREFILL_CACHED_TOTAL,
    keys.TOKENS_SAMPLED_TOTAL,
    keys.TOKENS_TRAINED_TOTAL,
    keys.COST_USD_TOTAL,
)


def spending_text(totals: Mapping[str, float], priced: str = "") -> str:
    """The run's tokens (and dollars, where prices are set) so far, in one line; `priced`
    says where the prices came from (" (list prices of DATE)")."""
    if not totals:
        return ""
    prefill = int(totals.get(keys.TOKENS_PREFILL_TOTAL, 0))
    cached = int(totals.get(keys.TOKENS_PREFILL_CACHED_TOTAL, 0))
    words = (
        f"tokens prefill {prefill:,} ({cached:,} cached), "
        f"sampled {int(totals.get(keys.TOKENS_SAMPLED_TOTAL, 0)):,}, "
        f"trained {int(totals.get(keys.TOKENS_TRAINED_TOTAL, 0)):,}"
    )
    usd = totals.get(keys.COST_USD_TOTAL)
    return f"${usd:.4f}{priced}; {words}" if usd is not None else words


def _float_or_zero(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def undone_best_text(undone: tuple[int, float]) -> str:
    """The better step a rollback undid, as a collapse's reason quotes it."""
    return f"{_reward(undone[1])} at step {undone[0]} before a rollback undid it"


def next_commands(summary: RunSummary) -> list[tuple[str, str]]:
    """(what, command) pairs: look at the run again, continue it (a collapsed run with a
    checkpoint to roll back to: from it too, as a resume with `on_collapse = rollback` does); a run
    that completed before max_steps ran out of scenarios, which a resume would not change."""
    db = db_flag(summary.db_path)
    task = shlex.quote(summary.task or "TASK")
    if summary.foreign:  # trained by another program: only we can look at it again
        return [("look again", f"tinker-tui show --{summary.foreign} {task}")]
    commands = [("look again", f"tinker-tui show {summary.run_id}{db}")]
    if summary.status == "running":
        commands.append(("attach", f"tinker-tui attach {summary.run_id}{db}"))
        return commands
    resume = f"tinker-tui run {task} --resume {summary.run_id}{db}"
    if summary.cause in ("ran_out", "no_signal"):
        # More steps would find no scenarios either, or no reward that differs.
        return commands
    if summary.status == "completed":
        more = max(summary.max_steps, summary.step) * 2 or 10
        resume += f" --steps {more}"
        commands.append(("train further", resume))
    elif summary.cause == "budget" and summary.max_cost_usd > 0:
        # The same budget would stop it again at once: continuing means a larger one.
        commands.append(("continue", f"{resume} --max-cost-usd {2 * summary.max_cost_usd:g}"))
    else:
        commands.append(("continue", resume))
    if summary.collapse and summary.rollback_to:
        # With its allowance spent, a resumed run would not roll back: allow one more.
        spent = (
            summary.max_rollbacks is not None
            and summary.automatic_rollbacks >= summary.max_rollbacks
        )
        allow = f" --max-rollbacks {summary.automatic_rollbacks + 1}" if spent else ""
        commands.append(("roll back", f"{resume} --on-collapse rollback{allow}"))
    return commands


def stuck_text(stuck: StalledRollout) -> str:
    """A stuck group's rollouts in one line: which, for how long, where they wait."""
    return (
        f"rollouts of scenario {stuck.scenario_id} (group {stuck.group_id}) stuck for "
        f"{stuck.age:.0f} s; {stuck.waiting_at}"
    )


def headline(summary: RunSummary) -> str:
    """`run ID completed at step 60/60 (reached max_steps)`."""
    of = f"/{summary.max_steps}" if summary.max_steps else ""
    why = f" ({summary.reason})" if summary.reason else ""
    nothing = " but trained nothing" if summary.cause == "no_signal" else ""
    return f"run {summary.run_id} {summary.status} at step {summary.step}{of}{why}{nothing}"


def trained_nothing_text(summary: RunSummary) -> str:
    """The steps that trained nothing (every group's rewards equal), in words; "" when
    every step trained."""
    if summary.cause == "no_signal":
        return (
            "trained nothing: in every group all rewards were equal, so no step changed "
            "the weights (a reward that never varies teaches nothing)"
        )
    if summary.skipped_steps:
        return (
            f"{summary.skipped_steps} of {summary.step} steps trained nothing (every "
            "group's rewards equal)"
        )
    return ""


def failed_groups_text(summary: RunSummary) -> str:
    """What the task's errors cost: the rollouts that failed, of all, and the groups
    discarded for them; where each error is."""
    parts = []
    if summary.failed_rollouts:
        share = f" ({summary.failed_rollouts / summary.rollouts:.0%})" if summary.rollouts else ""
        parts.append(f"{summary.failed_rollouts:,} of {summary.rollouts:,} rollouts failed{share}")
    if summary.failed_groups:
        groups = f"{summary.failed_groups:,} group" + ("" if summary.failed_groups == 1 else "s")
        parts.append(f"{groups} lost" if parts else f"{groups} lost to failed rollouts")
    return "; ".join(parts) + " (`show --log`)"


def summary_lines(summary: RunSummary, *, log_lines: bool = True) -> list[str]:
    """The summary printed when a run ends: status, steps, rewards, checkpoint, store, the
    commands to look again and to continue; a failed run's last log lines (`log_lines`)."""
    lines = [headline(summary)]
    best = ""
    if summary.best_reward is not None:
        best = f", best {_reward(summary.best_reward)} at step {summary.best_step}"
    if summary.undone_best is not None:
        best += f" ({undone_best_text(summary.undone_best)})"
    lines.append(f"  reward: final {_reward(summary.final_reward)}{best}")
    if summary.checkpoint:
        lines.append(f"  last checkpoint: {summary.checkpoint} (step {summary.checkpoint_step})")
    else:
        lines.append("  last checkpoint: none")
    if nothing := trained_nothing_text(summary):
        lines.append(f"  {nothing}")
    if summary.collapse:
        if summary.collapse not in (summary.reason or ""):  # a health stop says it above
            lines.append(f"  health: {summary.collapse}")
    for rollback in summary.rollbacks:
        lines.append(f"  rolled back {rollback}")
    if summary.failed_groups or summary.failed_rollouts:
        lines.append(f"  errors: {failed_groups_text(summary)}")
    lines += [f"  stuck: {stuck_text(stuck)}" for stuck in summary.stalled]
    if summary.totals:
        lines.append(f"  spent: {spending_text(summary.totals, summary.priced_as)}")
    if summary.db_path is not None:
        lines.append(f"  store: {summary.db_path}")
    if summary.engine_log is not None:
        lines.append(f"  engine log: {summary.engine_log}")
    if log_lines and summary.status == "failed" and summary.last_log:
        lines.append("  last log lines:")
        lines += [f"    {line}" for line in summary.last_log]
    width = max(len(what) for what, _ in next_commands(summary)) + 1
    lines += [
        f"  {(what + ':').ljust(width)} {command}" for what, command in next_commands(summary)
    ]
    return lines + list(summary.trackers)  # last: where W&B / TensorBoard records went
