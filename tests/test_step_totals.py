"""The headless step lines and the dashboard count the run's totals (discards, converged
groups, failed rollouts, elapsed time) as `show` reads them back from the store, on the real
local backend: across a resume (the resumed process started them at 0) and a rollback (the
live counts kept the groups of the steps it undid, which the store deletes)."""

from __future__ import annotations

import dataclasses
import io
import random

from test_rollback import SHORT, STEPS, collapsing_task, endless_scenarios

from tinker_tui import Scenario, Task, Trajectory
from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.headless import HeadlessReporter
from tinker_tui.app.run_summary import SummaryCollector
from tinker_tui.app.store_session import StoreSession
from tinker_tui.engine.clock import FakeClock
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.events import CommandReceived, Event
from tinker_tui.engine.run import Run
from tinker_tui.engine.store import find_run


def steady_task() -> Task:
    """Every third scenario earns 1.0 on every rollout (a zero-variance group: converged
    once 1.0 is the best seen), the others 0 or 1 at random: discards from the first steps."""

    async def rollout(client, model, scenario: Scenario) -> Trajectory:
        completion = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Say yes."}], max_tokens=2
        )
        draw = random.Random(f"{scenario.id}/{completion.choices[0].message.content}")
        reward = 1.0 if scenario.data % 3 == 0 else float(draw.random() < 0.5)
        return Trajectory.from_choices(completion.choices, reward=reward)

    return Task(name="steady", scenarios=endless_scenarios, rollout=rollout)


def step_lines(reporter: HeadlessReporter) -> list[str]:
    return [
        line
        for line in reporter.out.getvalue().splitlines()  # type: ignore[attr-defined]
        if line.startswith("step ")
    ]


async def shown(db, run_id: str) -> tuple[list[str], list[Event]]:
    """The step lines `show RUN --no-ui` prints, and the events it reads."""
    run = await find_run(db, run_id)
    events = await StoreSession(db, run).read_all()
    reporter = HeadlessReporter(out=io.StringIO())
    for event in events:
        reporter.handle(event)
    return step_lines(reporter), events


async def test_a_resumed_runs_step_lines_go_on_from_the_runs_totals(tmp_path):
    config = RunConfig(
        max_steps=5,
        group_size=4,
        groups_per_step=3,
        rollout_workers=2,
        max_steps_off_policy=0,
        checkpoint_every=2,
        seed=5,
        warmup_steps=0,
    )
    db = tmp_path / "runs.db"
    first = Run(task=steady_task(), config=config, backend="local", db_path=db, headless=True)
    assert await first.run() == "completed"
    again = Run(
        task=steady_task(),
        config=dataclasses.replace(config, max_steps=9),
        backend="local",
        db_path=db,
        run_id=first.run_id,
        resume=True,
        headless=True,
    )
    reporter = HeadlessReporter(out=io.StringIO())
    summary = SummaryCollector(task="steady", db_path=db)
    reporter.remember(await summary.read_earlier(db, first.run_id))
    again.events.subscribe(reporter.handle)
    assert await again.run() == "completed"

    live = step_lines(reporter)
    stored, _ = await shown(db, first.run_id)
    assert len(live) == 4 and live == stored[-4:], (live, stored)
    # not a test that passes on zeros: the run had counted converged groups by then
    assert " converged 0 " not in live[0], live[0]


async def test_live_totals_after_a_rollback_are_those_show_reads(tmp_path):
    """The collapse's all-zero groups were no-signal discards of the steps the rollback
    undid: after it, neither the step lines nor the dashboard count them, as `show` does
    not (the store deleted them)."""
    phase = {"collapsing": True}
    config = RunConfig(
        max_steps=STEPS,
        group_size=4,
        groups_per_step=2,
        rollout_workers=2,
        max_steps_off_policy=0,
        checkpoint_every=2,
        seed=3,
        on_collapse="rollback",
        max_rollbacks=1,
        rollback_lr_scale=0.5,
        learning_rate=1e-3,
        keep_last_checkpoints=2,
        collapse_groups=SHORT,
    )
    db = tmp_path / "runs.db"
    run = Run(
        task=collapsing_task(phase), config=config, backend="local", db_path=db, headless=True
    )
    reporter = HeadlessReporter(out=io.StringIO())
    dashboard = DashboardState(FakeClock(0.0))
    undone_no_signal: list[int] = []

    def on_event(event: Event) -> None:
        if isinstance(event, CommandReceived) and event.command == "rolled_back":
            phase["collapsing"] = False  # the policy after the rollback learns again
            undone_no_signal.append(reporter.zero_variance.no_signal)
        reporter.handle(event)
        dashboard.apply(event)

    run.events.subscribe(on_event)
    assert await run.run() == "completed"
    assert undone_no_signal and undone_no_signal[0] > 0  # the collapse's groups, counted

    live = step_lines(reporter)
    stored, events = await shown(db, run.run_id)
    assert live[-1] == stored[-1], (live[-1], stored[-1])
    read_back = DashboardState(FakeClock(0.0))
    for event in events:
        read_back.apply(event)

    def totals(state: DashboardState) -> tuple[object, ...]:
        return (
            state.discarded,
            state.converged_groups,
            state.no_signal_groups,
            state.groups_sampled,
            state.rollouts_failed,
            state.rollouts_ended,
        )

    assert totals(dashboard) == totals(read_back)
